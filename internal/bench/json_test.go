package bench

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func doc(label, program string, p2p []P2PRecord, coll []CollRecord) *Document {
	return &Document{Schema: Schema, Header: RunHeader{Program: program, Label: label, Backend: "tcp", Ranks: 2}, P2P: p2p, Coll: coll}
}

func TestJSONRoundTrip(t *testing.T) {
	zero, some := 0.0, 1.5
	d := &Document{
		Schema: Schema,
		Header: RunHeader{
			Program: "courier bench", Label: "a \"quoted\" label", Backend: "tcp", Transport: "shm", Library: "courier v0",
			Ranks: 2, Date: "2026-12-01T09:00:00Z", Host: "h", GoVersion: "go1.26", GOMAXPROCS: 2,
			Command: []string{"courier", "bench", "-lat", "1"}, Env: map[string]string{"COURIER_BACKEND": "tcp"},
			Memory: "host", Pattern: "osu", Window: 64, Reps: 3, InitMicros: 1234.5,
		},
		P2P: []P2PRecord{
			Row{Kind: "latency", Bytes: 1, Latency: 5500 * time.Nanosecond, GBps: 1.8e-4, Allocs: 0}.Record(),
			Row{Kind: "bandwidth", Bytes: 4096, GBps: 2.5}.Record(),
		},
		Coll: []CollRecord{
			CollRow{Kind: "allreduce", Bytes: 8, Time: 80 * time.Microsecond, AlgBW: 1e-4, BusBW: 1e-4, Allocs: 1.5}.Record(),
		},
	}
	if got := d.P2P[0]; got.LatencyMicros != 5.5 || got.Allocs == nil || *got.Allocs != zero {
		t.Errorf("latency record %+v: want 5.5 µs and 0 allocs", got)
	}
	if got := d.P2P[1]; got.LatencyMicros != 0 || got.Allocs != nil {
		t.Errorf("bandwidth record %+v: want no latency and no allocs", got)
	}
	if got := d.Coll[0]; got.TimeMicros != 80 || *got.Allocs != some {
		t.Errorf("collective record %+v", got)
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, d); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{`"schema": "courier-bench/1"`, `"allocs": 0`, `"latency_us": 5.5`, `"time_us": 80`} {
		if !strings.Contains(text, want) {
			t.Errorf("JSON lacks %s:\n%s", want, text)
		}
	}
	if strings.Count(text, `"latency_us"`) != 1 {
		t.Errorf("latency_us on a bandwidth row:\n%s", text)
	}
	back, err := ReadJSON(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Errorf("read back\n%+v\nwant\n%+v", back, d)
	}
}

func TestReadJSONRefuses(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{`{"schema": "courier-bench/2"}`, `schema "courier-bench/2"`},
		{`{"header": {}}`, `schema ""`},
		{`{"schema": "courier-bench/1"} {}`, "more than one JSON value"},
		{`{"schema": "courier-bench/1", "p2p": [{"kind": "lat", "bytes": 1}]}`, `kind "lat"`},
		{`{"schema": "courier-bench/1", "coll": [{"name": "", "bytes": 1}]}`, "coll row 0"},
		{`{"schema": "courier-bench/1", "p2p": [{"kind": "latency", "bytes": -1}]}`, "negative"},
		{`{"schema": "courier-bench/1", "p2p": [{"kind": "latency", "bytes": "1"}]}`, "cannot unmarshal"},
		{`not json`, "invalid character"},
	} {
		_, err := ReadJSON(strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.text, err, c.want)
		}
	}
}

func TestCombine(t *testing.T) {
	lat := func(us ...float64) []P2PRecord {
		var out []P2PRecord
		for i, v := range us {
			out = append(out, P2PRecord{Kind: "latency", Bytes: 1 << (10 * i), LatencyMicros: v}, P2PRecord{Kind: "bandwidth", Bytes: 1 << (10 * i), GBps: v})
		}
		return out
	}
	docs := []*Document{
		doc("a", "courier bench", lat(3, 30), []CollRecord{{Name: "bcast", Bytes: 8, TimeMicros: 7}}),
		doc("m", "p2p.c", lat(1, 10), nil),
		doc("a", "courier bench", lat(1, 50), nil),
		doc("a", "courier bench", lat(2), []CollRecord{{Name: "bcast", Bytes: 8, TimeMicros: 9}}),
		doc("", "coll.c", nil, []CollRecord{{Name: "allreduce", Bytes: 8, TimeMicros: 5}}),
	}
	med := Combine(docs, true)
	if len(med) != 3 || med[0].Label != "a" || med[1].Label != "m" || med[2].Label != "coll.c tcp" {
		t.Fatalf("labels %+v", med)
	}
	a := med[0]
	// 1 B: 3, 1, 2 -> 2; 1 KiB: 30, 50 -> their mean, 40; bcast 7, 9 -> 8.
	if !a.Courier || a.Runs != 3 || a.Latency[1] != 2 || a.Latency[1024] != 40 || a.Bandwidth[1] != 2 || a.Coll["bcast"][8] != 8 {
		t.Errorf("merged series %+v", a)
	}
	if med[1].Courier || med[1].Runs != 1 {
		t.Errorf("the MPI series %+v", med[1])
	}
	each := Combine(docs, false)
	var labels []string
	for _, s := range each {
		labels = append(labels, s.Label)
	}
	if want := []string{"a", "m", "a (2)", "a (3)", "coll.c tcp"}; !reflect.DeepEqual(labels, want) {
		t.Errorf("labels %q, want %q", labels, want)
	}
	if got := CollNames(med); !reflect.DeepEqual(got, []string{"allreduce", "bcast"}) {
		t.Errorf("CollNames %q", got)
	}
}

func TestTable(t *testing.T) {
	docs := []*Document{
		doc("courier tcp", "courier bench", []P2PRecord{{Kind: "latency", Bytes: 1, LatencyMicros: 20}, {Kind: "bandwidth", Bytes: 1 << 20, GBps: 3}}, nil),
		doc("Open MPI TCP", "p2p.c", []P2PRecord{{Kind: "latency", Bytes: 1, LatencyMicros: 5}, {Kind: "latency", Bytes: 4096, LatencyMicros: 6}, {Kind: "bandwidth", Bytes: 1 << 20, GBps: 4}}, nil),
		doc("Open MPI vader", "coll.c", nil, []CollRecord{{Name: "allreduce", Bytes: 8, TimeMicros: 4}}),
		doc("courier tcp", "courier bench", nil, []CollRecord{{Name: "allreduce", Bytes: 8, TimeMicros: 10}}),
	}
	var b strings.Builder
	if err := Table(&b, Combine(docs, true)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"one-way latency, µs (median over the runs of each label)\n\n| bytes | courier tcp | Open MPI TCP | courier tcp ÷ Open MPI TCP |\n|---|---|---|---|\n",
		"| 1 B | 20.0 | 5.00 | 4.00 |\n",
		"| 4 KiB | — | 6.00 | — |\n",
		"bandwidth, GB/s",
		"| 1 MiB | 3.00 | 4.00 | 0.75 |\n",
		"allreduce, µs per call",
		"| bytes | courier tcp | Open MPI vader | courier tcp ÷ Open MPI vader |",
		"| 8 B | 10.0 | 4.00 | 2.50 |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if strings.Contains(out, "Open MPI vader |\n|---|---|---|---|\n| 1 B") {
		t.Error("a series without latency figures has a latency column")
	}
}

func TestSizeName(t *testing.T) {
	for n, want := range map[int]string{0: "0 B", 1: "1 B", 1000: "1000 B", 4096: "4 KiB", 1536: "1.5 KiB", 64 << 20: "64 MiB", 1 << 30: "1 GiB"} {
		if got := SizeName(n); got != want {
			t.Errorf("SizeName(%d) = %q, want %q", n, got, want)
		}
	}
}
