package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/trace"
	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

// courierTrace runs courier trace with args, in this process.
func courierTrace(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(append([]string{"courier", "trace"}, args...), &o, &e)
	return code, o.String(), e.String()
}

// recordJob runs a job of n ranks with tracing on, each exchanging with
// its neighbours (two Isends in flight together) and calling an
// Allreduce, and returns their files.
func recordJob(t *testing.T, dir string, n int) []string {
	t.Helper()
	spec := filepath.Join(dir, "job.json")
	mptest.Run(t, n, func(t *testing.T, c *mp.Comm) {
		right, left := (c.Rank()+1)%n, (c.Rank()+n-1)%n
		in := [2][]float64{make([]float64, 64), make([]float64, 64)}
		out := make([]float64, 64)
		reqs := []*mp.Request{mp.Irecv(c, in[0], left, 0), mp.Irecv(c, in[1], right, 0),
			mp.Isend(c, out, right, 0), mp.Isend(c, out, left, 0)}
		require.NoError(t, mp.WaitAll(reqs...))
		span := c.Trace("update")
		require.NoError(t, mp.Allreduce(c, out[:1], out[:1], mp.Sum))
		span.End()
	}, mptest.WithInitOptions(mp.WithTrace(spec)))
	files := make([]string, n)
	for r := range n {
		files[r] = filepath.Join(dir, "job.rank"+strconv.Itoa(r)+".json")
	}
	return files
}

// TestTraceMergeAndDraw: the files of a job's ranks merge into one
// trace that holds every rank's spans on one clock, and draw as an SVG
// document with a row per rank.
func TestTraceMergeAndDraw(t *testing.T) {
	dir := t.TempDir()
	files := recordJob(t, dir, 3)
	merged, svg := filepath.Join(dir, "merged.json"), filepath.Join(dir, "timeline.svg")
	code, stdout, stderr := courierTrace(t, append([]string{"-o", merged, "-svg", svg}, files...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "3 ranks")
	assert.Empty(t, stderr)

	m, err := trace.ReadFile(merged)
	require.NoError(t, err)
	require.Len(t, m.OtherData.Ranks, 3)
	total := 0
	origin := m.OtherData.OriginUnixNano
	for r, path := range files {
		f, err := trace.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, r, m.OtherData.Ranks[r].Rank)
		assert.LessOrEqual(t, origin, f.OtherData.OriginUnixNano)
		// Each span moves by the difference of its rank's origin.
		shift := trace.Micros(f.OtherData.OriginUnixNano - origin)
		var mine, theirs []float64
		for _, e := range f.TraceEvents {
			if e.Ph == "X" {
				mine = append(mine, e.Ts+shift)
				total++
			}
		}
		for _, e := range m.TraceEvents {
			if e.Ph == "X" && e.Pid == r {
				theirs = append(theirs, e.Ts)
			}
		}
		assert.ElementsMatch(t, roundAll(mine), roundAll(theirs), "rank %d's spans", r)
	}
	assert.Equal(t, 6*3, total, "4 messages, an Allreduce and a span on each of 3 ranks")

	// The drawing is XML, with a row per rank (each on its host track),
	// a rectangle per span, and a time axis.
	rows, spans, ticks := map[string]string{}, 0, 0
	fh, err := os.Open(svg)
	require.NoError(t, err)
	defer fh.Close()
	dec := xml.NewDecoder(fh)
	var root string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the SVG is not well-formed XML")
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = el.Name.Local
		}
		attr := map[string]string{}
		for _, a := range el.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch {
		case el.Name.Local == "g" && attr["class"] == "row":
			assert.NotContains(t, rows, attr["data-rank"], "two rows of rank %s", attr["data-rank"])
			rows[attr["data-rank"]] = attr["data-track"]
		case el.Name.Local == "rect" && attr["class"] == "span":
			spans++
		case el.Name.Local == "line":
			ticks++
		}
	}
	assert.Equal(t, "svg", root)
	assert.Equal(t, map[string]string{"0": "host", "1": "host", "2": "host"}, rows)
	assert.Equal(t, total, spans)
	assert.Greater(t, ticks, 3)

	// A merged file is an input like the others: alone it draws again.
	code, _, stderr = courierTrace(t, "-svg", filepath.Join(dir, "again.svg"), merged)
	require.Equal(t, 0, code, stderr)

	// A window draws only the spans wholly inside it: from the start to
	// just past the first span's end, fewer than all, at least one; an
	// empty window is an error, a reversed one a usage error.
	start, firstEnd := math.Inf(1), math.Inf(1)
	for _, e := range m.TraceEvents {
		if e.Ph == "X" && e.Ts < start {
			start, firstEnd = e.Ts, e.Ts+*e.Dur
		}
	}
	upto := time.Duration((firstEnd-start)*1e3)*time.Nanosecond + time.Microsecond
	part := filepath.Join(dir, "part.svg")
	code, _, stderr = courierTrace(t, "-svg", part, "-to", upto.String(), merged)
	require.Equal(t, 0, code, stderr)
	b, err := os.ReadFile(part)
	require.NoError(t, err)
	n := strings.Count(string(b), `class="span"`)
	assert.GreaterOrEqual(t, n, 1)
	assert.Less(t, n, total)
	code, _, _ = courierTrace(t, "-svg", part, "-from", "1h", merged)
	assert.Equal(t, 1, code)
	code, _, _ = courierTrace(t, "-svg", part, "-from", "2s", "-to", "1s", merged)
	assert.Equal(t, 2, code)
}

func roundAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(int64(x*1e3+0.5)) / 1e3
	}
	return out
}

// TestTraceBadInput: what is not a readable courier trace is an error
// naming the file, exit status 1; a wrong command line is exit status 2.
func TestTraceBadInput(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	f := trace.Build(trace.Meta{Format: trace.FormatName, Version: trace.Version, OriginUnixNano: 1,
		Ranks: []trace.RankInfo{{Rank: 0, Size: 1}}}, 0, []string{trace.HostTrack}, nil)
	b, err := json.Marshal(f)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(good, b, 0o644))
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	out := filepath.Join(dir, "out.svg")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no arguments", nil, 2, "want trace files"},
		{"no output", []string{good}, 2, "want trace files, and -o or -svg"},
		{"unknown flag", []string{"-x", good}, 2, "flag provided but not defined"},
		{"missing file", []string{"-svg", out, filepath.Join(dir, "none.json")}, 1, "none.json: no such file"},
		{"malformed JSON", []string{"-svg", out, write("bad.json", `{"traceEvents": [`)}, 1, "bad.json: not a courier trace"},
		{"not JSON", []string{"-svg", out, write("text.json", "rank 0 sent 4 bytes\n")}, 1, "malformed JSON"},
		{"another program's trace", []string{"-o", out, write("chrome.json", `{"traceEvents":[{"name":"x","ph":"X","ts":0,"dur":1,"pid":1,"tid":1}]}`)}, 1, "no courier metadata"},
		{"a rank twice", []string{"-o", out, good, good}, 1, "rank 0"},
		{"output not writable", []string{"-svg", filepath.Join(dir, "no dir", "x.svg"), good}, 1, "no dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := courierTrace(t, tc.args...)
			assert.Equal(t, tc.code, code, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
	_, err = os.Stat(out)
	assert.True(t, errors.Is(err, os.ErrNotExist), "a failed run wrote %s", out)

	code, stdout, _ := courierTrace(t, "-h")
	assert.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(stdout, "usage: courier trace"))
}

// FuzzTraceInput: whatever a file holds, courier trace draws it or says
// why not, and never panics.
func FuzzTraceInput(f *testing.F) {
	f.Add([]byte(`{"traceEvents":[{"name":"Send","ph":"X","ts":5,"dur":2,"pid":0,"tid":0,"args":{"track":"host","lane":3,"peer":1}}],"otherData":{"format":"courier-trace","version":1,"ranks":[{"rank":0,"size":2}]}}`))
	f.Add([]byte(`{"traceEvents":[{"name":"thread_name","ph":"M","pid":0,"tid":9,"args":{"name":"stream 1 +2"}}],"otherData":{"format":"courier-trace","version":1,"ranks":[{"rank":0,"size":1}]}}`))
	f.Add([]byte(`{`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, in []byte) {
		p := filepath.Join(dir, "in.json")
		if err := os.WriteFile(p, in, 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := courierTrace(t, "-svg", filepath.Join(dir, "out.svg"), p)
		if code != 0 && !strings.Contains(stderr, "courier trace: ") {
			t.Fatalf("exit %d without saying why: %q", code, stderr)
		}
	})
}
