//go:build unix

package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/bench"
)

// The C programs' documents (bench/mpi/p2p.c and coll.c -json, from a
// run of bench/host-compare.sh).
const (
	mpiP2P  = "testdata/p2p-openmpi-tcp.json"
	mpiColl = "testdata/coll-openmpi-vader.json"
)

// checkUsage fails unless usage has an entry for every flag of fs (a line
// starting "  -name") that states the flag's default.
func checkUsage(t *testing.T, usage string, fs *flag.FlagSet) {
	t.Helper()
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		i := strings.Index(usage, "\n  -"+f.Name+" ")
		if i < 0 {
			t.Errorf("usage has no entry for -%s", f.Name)
			return
		}
		entry := usage[i+1:]
		if j := strings.Index(entry[1:], "\n  -"); j >= 0 {
			entry = entry[:j+1]
		}
		if j := strings.Index(entry, "\n\n"); j >= 0 {
			entry = entry[:j]
		}
		if !strings.Contains(entry, "(default") {
			t.Errorf("-%s: no default in %q", f.Name, entry)
		}
		if f.DefValue != "" && !strings.Contains(entry, "default "+f.DefValue) {
			t.Errorf("-%s: the default %q is not in %q", f.Name, f.DefValue, entry)
		}
	})
	if n == 0 {
		t.Error("no flags")
	}
}

func TestBenchHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"bench", "-h"}, {"bench", "--help"}, {"help", "bench"}} {
		code, stdout, stderr := courier(t, args...)
		if code != 0 || stdout != benchUsage || stderr != "" {
			t.Errorf("courier %q: exit %d, stderr %q; want exit 0 and the usage", args, code, stderr)
		}
	}
	fs, _ := benchFlags(io.Discard)
	checkUsage(t, benchUsage, fs)
	for _, want := range []string{"measured N times and the\n                    median printed", "sends in flight per bandwidth window"} {
		if !strings.Contains(benchUsage, want) {
			t.Errorf("usage lacks %q", want)
		}
	}
}

func TestPlotHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"plot", "-h"}, {"help", "plot"}} {
		code, stdout, stderr := courier(t, args...)
		if code != 0 || stdout != plotUsage || stderr != "" {
			t.Errorf("courier %q: exit %d, stderr %q; want exit 0 and the usage", args, code, stderr)
		}
	}
	// The flags as courier plot defines them, found through its errors.
	fs := flag.NewFlagSet("plot", flag.ContinueOnError)
	fs.String("o", "", "")
	fs.Bool("table", false, "")
	fs.Bool("median", false, "")
	fs.String("title", "", "")
	checkUsage(t, plotUsage, fs)
	if code, _, stderr := courier(t, "plot", "-nosuch"); code != 2 || !strings.Contains(stderr, "flag provided but not defined") {
		t.Errorf("an unknown flag: exit %d, %q", code, stderr)
	}
}

// checkSVG fails unless b is well-formed XML with an svg root holding
// every string of want.
func checkSVG(t *testing.T, b []byte, want ...string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the plot is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("the plot's root element is %q, want svg", root)
	}
	for _, w := range want {
		if !bytes.Contains(b, []byte(w)) {
			t.Errorf("the plot lacks %q", w)
		}
	}
}

// TestBenchJSON runs courier bench with -json FILE, -plot and -compare
// (the C program's document), then with -json - on the collectives.
func TestBenchJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, svg := filepath.Join(dir, "run.json"), filepath.Join(dir, "run.svg")
	args := []string{"bench", "-reps", "1", "-lat", "64k", "-bw", "", "-label", "this & that", "-json", out, "-plot", svg, "-compare", mpiP2P}
	start := time.Now()
	code, stdout, stderr := courier(t, args...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "latency           65536") {
		t.Errorf("-json FILE: no table on stdout:\n%s", stdout)
	}
	d, err := bench.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	h := d.Header
	host, _ := os.Hostname()
	if h.Program != "courier bench" || h.Label != "this & that" || h.Backend != "host" || h.Ranks != 2 || h.Host != host ||
		h.GoVersion != runtime.Version() || h.GOMAXPROCS < 1 || h.Memory != "host" || h.Pattern != "osu" || h.Window != 64 ||
		h.Reps != 1 || h.InitMicros <= 0 || !strings.HasPrefix(h.Library, "courier ") {
		t.Errorf("header %+v", h)
	}
	if date, err := time.Parse(time.RFC3339, h.Date); err != nil || date.Before(start.Add(-time.Second)) || date.After(time.Now()) {
		t.Errorf("date %q (%v), want the run's start", h.Date, err)
	}
	if want := append([]string{"courier"}, args...); !reflect.DeepEqual(h.Command, want) {
		t.Errorf("command %q, want %q", h.Command, want)
	}
	for k := range h.Env {
		if k == "COURIER_JOB_KEY" || k == "COURIER_RANK" {
			t.Errorf("env holds the launcher's %s", k)
		}
	}
	if len(d.P2P) != 1 || len(d.Coll) != 0 {
		t.Fatalf("rows %+v %+v, want one latency row", d.P2P, d.Coll)
	}
	r := d.P2P[0]
	if r.Kind != "latency" || r.Bytes != 65536 || r.LatencyMicros <= 0 || r.GBps <= 0 || r.Allocs == nil {
		t.Errorf("row %+v", r)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	checkSVG(t, b, "this &amp; that", "Open MPI TCP", "one-way latency")

	code, stdout, stderr = courier(t, "bench", "-reps", "1", "-coll", "bcast", "-collsizes", "8", "-json", "-")
	if code != 0 {
		t.Fatalf("-json -: exit %d, stderr %q", code, stderr)
	}
	d, err = bench.ReadJSON(strings.NewReader(stdout)) // the document alone, no table
	if err != nil {
		t.Fatalf("-json -: %v in\n%s", err, stdout)
	}
	if d.Header.Label != "courier host" || d.Header.Pattern != "" || len(d.P2P) != 0 || len(d.Coll) != 1 ||
		d.Coll[0].Name != "bcast" || d.Coll[0].Bytes != 8 || d.Coll[0].TimeMicros <= 0 || d.Coll[0].Allocs == nil {
		t.Errorf("-json - -coll: %+v", d)
	}
}

// TestBenchCompareErrors: -compare files are read before anything runs.
func TestBenchCompareErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"schema": "other"}`), 0o644)
	for _, c := range []struct {
		file, want string
	}{
		{filepath.Join(dir, "missing.json"), "no such file"},
		{bad, `bad.json: schema "other", want "courier-bench/1"`},
	} {
		code, _, stderr := courier(t, "bench", "-plot", filepath.Join(dir, "x.svg"), "-compare", c.file)
		if code != 1 || !strings.Contains(stderr, "courier bench: -compare: ") || !strings.Contains(stderr, c.want) {
			t.Errorf("-compare %s: exit %d, stderr %q; want exit 1 and %q", c.file, code, stderr, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.svg")); err == nil {
		t.Error("a plot was drawn")
	}
}

// TestPlot tabulates and draws the C programs' documents beside two of
// courier's, without running anything.
func TestPlot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var files []string
	for i, lat := range []float64{30, 10, 20} {
		d := &bench.Document{Schema: bench.Schema, Header: bench.RunHeader{Program: "courier bench", Label: "courier tcp", Backend: "tcp", Ranks: 2},
			P2P:  []bench.P2PRecord{{Kind: "latency", Bytes: 1, LatencyMicros: lat}, {Kind: "bandwidth", Bytes: 65536, GBps: 1}},
			Coll: []bench.CollRecord{{Name: "bcast", Bytes: 8, TimeMicros: 1}}}
		path := filepath.Join(dir, "courier"+string(rune('0'+i))+".json")
		if err := writeFile(path, func(w io.Writer) error { return bench.WriteJSON(w, d) }); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	svg := filepath.Join(dir, "all.svg")
	code, stdout, stderr := courier(t, append([]string{"plot", "-median", "-table", "-title", "a title", "-o", svg, mpiP2P, mpiColl}, files...)...)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	mpi, err := bench.ReadFile(mpiP2P)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| bytes | Open MPI TCP | courier tcp | courier tcp ÷ Open MPI TCP |",
		"| 1 B | " + figure(mpi.P2P[0].LatencyMicros) + " | 20.0 | ",
		"bcast, µs per call",
		"| bytes | Open MPI vader | courier tcp | courier tcp ÷ Open MPI vader |",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	checkSVG(t, b, "Open MPI TCP", "Open MPI vader", "courier tcp", "a title: one-way latency", "a title: bcast, time per call")
	if bytes.Contains(b, []byte("courier tcp (2)")) {
		t.Error("-median: the runs of one label are more than one line")
	}

	// Without -median, each run is a line of its own.
	code, _, _ = courier(t, append([]string{"plot", "-o", svg}, files...)...)
	if b, _ := os.ReadFile(svg); code != 0 || !bytes.Contains(b, []byte("courier tcp (3)")) {
		t.Errorf("without -median: exit %d, no third line", code)
	}

	code, _, stderr = courier(t, "plot", "-table", filepath.Join(dir, "missing.json"))
	if code != 1 || !strings.Contains(stderr, "courier plot: ") || !strings.Contains(stderr, "missing.json") {
		t.Errorf("a missing file: exit %d, stderr %q", code, stderr)
	}
}

// figure is v as bench.Table prints it.
func figure(v float64) string {
	var b strings.Builder
	bench.Table(&b, []bench.Series{{Label: "x", Latency: map[int]float64{1: v}}})
	line := strings.Split(b.String(), "\n")[4] // | 1 B | v |
	return strings.TrimSuffix(strings.TrimPrefix(line, "| 1 B | "), " |")
}
