package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type iv struct{ a, b int64 }

func ivBounds(v iv) (int64, int64) { return v.a, v.b }

func TestLanes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spans []iv
		lanes []int
		n     int
	}{
		{"none", nil, []int{}, 0},
		{"one after another", []iv{{0, 5}, {5, 9}, {10, 12}}, []int{0, 0, 0}, 1},
		{"nested", []iv{{0, 10}, {2, 5}, {3, 4}, {6, 10}}, []int{0, 0, 0, 0}, 1},
		{"overlapping", []iv{{0, 10}, {5, 15}}, []int{0, 1}, 2},
		// Isends posted in turn and completed in turn: each in flight
		// beside the others.
		{"window", []iv{{0, 10}, {1, 11}, {2, 12}, {20, 21}}, []int{0, 1, 2, 0}, 3},
		{"same start, longer first", []iv{{0, 3}, {0, 8}}, []int{0, 0}, 1},
		{"a lane freed", []iv{{0, 10}, {5, 15}, {11, 20}}, []int{0, 1, 0}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lanes, n := Lanes(tc.spans, ivBounds)
			assert.Equal(t, tc.lanes, lanes)
			assert.Equal(t, tc.n, n)
		})
	}
}

// TestBuildNests: within every thread Build makes, spans nest or are
// apart, as the trace-event format wants.
func TestBuildNests(t *testing.T) {
	var spans []Span
	for i := range int64(50) {
		spans = append(spans, Span{Track: HostTrack, Name: "Isend", Cat: CatP2P, Start: i * 7 % 40, End: i*7%40 + i%9 + 1})
	}
	spans = append(spans, Span{Track: "stream 1", Name: "IallreduceOnStream", Cat: CatColl, Start: 3, End: 30})
	f := Build(Meta{Format: FormatName, Version: Version, Ranks: []RankInfo{{Rank: 2, Size: 3}}}, 2, []string{HostTrack, "stream 1", "stream 2"}, spans)
	byTid := map[int][]iv{}
	names := map[int]string{}
	for _, e := range f.TraceEvents {
		assert.Equal(t, 2, e.Pid)
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				names[e.Tid] = e.Args.Name
			}
		case "X":
			byTid[e.Tid] = append(byTid[e.Tid], iv{int64(e.Ts * 1e3), int64((e.Ts + *e.Dur) * 1e3)})
			assert.True(t, strings.HasPrefix(names[e.Tid], e.Args.Track), "span of track %q on thread %q", e.Args.Track, names[e.Tid])
		}
	}
	assert.Equal(t, "host", names[0])
	assert.Contains(t, names, 0)
	for tid, list := range byTid {
		for i, x := range list {
			for _, y := range list[i+1:] {
				apart := x.b <= y.a || y.b <= x.a
				nested := x.a <= y.a && y.b <= x.b || y.a <= x.a && x.b <= y.b
				assert.True(t, apart || nested, "thread %d (%s): %v and %v overlap", tid, names[tid], x, y)
			}
		}
	}
	var threads []string
	for tid := range len(names) {
		threads = append(threads, names[tid])
	}
	assert.Contains(t, threads, "stream 2", "a track without spans still has its thread")
	assert.Contains(t, threads, "host +1")
}

// rankFile is a small valid file of rank r whose origin is origin.
func rankFile(r int, origin int64, host string) *File {
	return Build(Meta{Format: FormatName, Version: Version, OriginUnixNano: origin, Clock: ClockSingleRank,
		Ranks: []RankInfo{{Rank: r, Size: 2, Host: host, InitUnixNano: origin}}},
		r, []string{HostTrack}, []Span{{Track: HostTrack, Name: "Send", Cat: CatP2P, Start: 1000, End: 3000,
			Args: Args{StartedUs: new(1.5)}}})
}

func encode(t *testing.T, f *File) []byte {
	t.Helper()
	b, err := json.Marshal(f)
	require.NoError(t, err)
	return b
}

func TestReadRoundTrip(t *testing.T) {
	f := rankFile(1, 1e18, "h")
	g, err := Read(bytes.NewReader(encode(t, f)))
	require.NoError(t, err)
	assert.Equal(t, f, g)
}

func TestReadRejects(t *testing.T) {
	good := string(encode(t, rankFile(0, 5, "h")))
	for name, in := range map[string]string{
		"empty":           "",
		"not JSON":        "hello",
		"cut short":       good[:len(good)/2],
		"an array":        `[{"name":"x","ph":"X","ts":1,"dur":1,"pid":0,"tid":0}]`,
		"another program": `{"traceEvents":[],"otherData":{"version":"1.0"}}`,
		"no metadata":     `{"traceEvents":[]}`,
		"newer version":   strings.Replace(good, `"version":1`, `"version":99`, 1),
		"no ranks":        `{"traceEvents":[],"otherData":{"format":"courier-trace","version":1,"ranks":[]}}`,
		"rank twice":      `{"traceEvents":[],"otherData":{"format":"courier-trace","version":1,"ranks":[{"rank":0,"size":2},{"rank":0,"size":2}]}}`,
		"rank past size":  `{"traceEvents":[],"otherData":{"format":"courier-trace","version":1,"ranks":[{"rank":2,"size":2}]}}`,
		"unknown pid":     strings.Replace(good, `"pid":0`, `"pid":7`, 1),
		"negative dur":    strings.Replace(good, `"dur":2`, `"dur":-2`, 1),
		"no dur":          strings.Replace(good, `"dur":2,`, ``, 1),
		"no phase":        strings.Replace(good, `"ph":"X"`, `"ph":""`, 1),
		"a ts string":     strings.Replace(good, `"ts":1,`, `"ts":"1",`, 1),
		"huge number":     strings.Replace(good, `"ts":1,`, `"ts":1e999,`, 1),
		"trailing data":   good + `{}`,
	} {
		t.Run(name, func(t *testing.T) {
			require.NotEqual(t, good, in, "the case changes nothing")
			_, err := Read(strings.NewReader(in))
			require.ErrorIs(t, err, ErrFormat)
		})
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadFile(filepath.Join(dir, "missing.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("{"), 0o644))
	_, err = ReadFile(bad)
	require.ErrorIs(t, err, ErrFormat)
	assert.Contains(t, err.Error(), bad)
}

func TestMerge(t *testing.T) {
	a, b := rankFile(0, 2_000_000, "h"), rankFile(1, 1_000_000, "h") // rank 1 began 1 ms earlier
	m, err := Merge(a, b)
	require.NoError(t, err)
	assert.Equal(t, int64(1_000_000), m.OtherData.OriginUnixNano)
	assert.Equal(t, ClockOneHost, m.OtherData.Clock)
	require.Len(t, m.OtherData.Ranks, 2)
	assert.Equal(t, 0, m.OtherData.Ranks[0].Rank)
	ts := map[int]float64{}
	started := map[int]float64{}
	for _, e := range m.TraceEvents {
		if e.Ph == "X" {
			ts[e.Pid], started[e.Pid] = e.Ts, *e.Args.StartedUs
		}
	}
	assert.InDelta(t, 1001.0, ts[0], 1e-9, "rank 0's span moves by the 1000 µs between the origins")
	assert.InDelta(t, 1.0, ts[1], 1e-9)
	assert.InDelta(t, 1001.5, started[0], 1e-9)
	// The inputs are left as they were.
	assert.InDelta(t, 1.5, *spansOfFile(a)[0].Args.StartedUs, 1e-9)

	m, err = Merge(a, rankFile(1, 1, "other"))
	require.NoError(t, err)
	assert.Contains(t, m.OtherData.Clock, "2 hosts")

	_, err = Merge(a, rankFile(0, 9, "h"))
	require.ErrorIs(t, err, ErrSameRank)
	_, err = Merge()
	require.Error(t, err)
	_, err = Merge(&File{})
	require.ErrorIs(t, err, ErrFormat)

	// A merged file reads back, and merges again with another rank.
	g, err := Read(bytes.NewReader(encode(t, m)))
	require.NoError(t, err)
	_, err = Merge(g, rankFile(1, 0, "h"))
	require.ErrorIs(t, err, ErrSameRank)
}

func spansOfFile(f *File) []Event {
	var out []Event
	for _, e := range f.TraceEvents {
		if e.Ph == "X" {
			out = append(out, e)
		}
	}
	return out
}

// FuzzRead: Read returns a file or an error, never panics, and what it
// accepts survives being written and read again.
func FuzzRead(f *testing.F) {
	good, _ := json.Marshal(rankFile(0, 5, "h"))
	f.Add(good)
	f.Add([]byte(`{"traceEvents":[{"ph":"X","pid":0,"ts":1,"dur":0}],"otherData":{"format":"courier-trace","version":1,"ranks":[{"rank":0,"size":1}]}}`))
	f.Add([]byte(`{"traceEvents":null,"otherData":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Read(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("Read: %v, which is not ErrFormat", err)
			}
			return
		}
		out, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("writing what Read accepted: %v", err)
		}
		if _, err := Read(bytes.NewReader(out)); err != nil {
			t.Fatalf("reading back what Read accepted: %v", err)
		}
		if _, err := Merge(got); err != nil {
			t.Fatalf("merging what Read accepted: %v", err)
		}
	})
}
