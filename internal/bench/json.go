package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Schema names the JSON document Document describes. Programs that write
// it (courier bench -json, bench/mpi/p2p.c and coll.c -json) put it in the
// document's "schema" field; a reader refuses any other.
const Schema = "courier-bench/1"

// Document is one run of a benchmark as JSON: courier bench -json writes
// it, and the C programs of bench/mpi write the same, so that the runs of
// both can be plotted and tabulated together. A run has point-to-point
// rows, collective rows, or both.
type Document struct {
	// Schema is the constant Schema.
	Schema string `json:"schema"`
	// Header says what ran, where and when.
	Header RunHeader `json:"header"`
	// P2P are the point-to-point rows in the order they were measured.
	P2P []P2PRecord `json:"p2p,omitempty"`
	// Coll are the collective rows in the order they were measured.
	Coll []CollRecord `json:"coll,omitempty"`
}

// RunHeader says what a run measured, where and when. Fields a program
// has no value for are left out.
type RunHeader struct {
	// Program is what measured: "courier bench", "p2p.c" or "coll.c".
	Program string `json:"program"`
	// Label names the run in a plot's legend and a table's columns
	// (courier bench -label; by default "courier BACKEND").
	Label string `json:"label"`
	// Backend is courier's backend (tcp, nccl, ...) or "mpi".
	Backend string `json:"backend"`
	// Transport is the transport asked for: COURIER_TRANSPORTS for
	// courier, the MPI transport (-transport of the C programs, else
	// OMPI_MCA_btl or UCX_TLS) for MPI; empty for the default.
	Transport string `json:"transport,omitempty"`
	// Library is the implementation and its version: "courier
	// v0.1.0-dev", or the first line of MPI_Get_library_version.
	Library string `json:"library,omitempty"`
	// Ranks is the job's size.
	Ranks int `json:"ranks"`
	// Date is when the run started, RFC 3339 in UTC.
	Date string `json:"date"`
	// Host is rank 0's host name.
	Host string `json:"host"`
	// GoVersion and GOMAXPROCS are rank 0's (courier only).
	GoVersion  string `json:"go_version,omitempty"`
	GOMAXPROCS int    `json:"gomaxprocs,omitempty"`
	// Command is the command line, program name first.
	Command []string `json:"command"`
	// Env holds the environment variables that change what is measured
	// (COURIER_* settings; OMPI_MCA_*, UCX_*, MPIR_CVAR_* for MPI).
	Env map[string]string `json:"env,omitempty"`
	// Memory is "host" or "device".
	Memory string `json:"memory"`
	// Pattern is the bandwidth pattern, "osu" or "stream", and Window the
	// sends per window of the osu pattern (point-to-point runs only).
	Pattern string `json:"pattern,omitempty"`
	Window  int    `json:"window,omitempty"`
	// Reps is how many figures each row is the median of.
	Reps int `json:"reps"`
	// InitMicros is how long initialization (mp.Init, MPI_Init) took on
	// rank 0, in microseconds.
	InitMicros float64 `json:"init_us,omitempty"`
}

// P2PRecord is one point-to-point row.
type P2PRecord struct {
	// Kind is "latency" or "bandwidth".
	Kind string `json:"kind"`
	// Bytes is the message size.
	Bytes int `json:"bytes"`
	// LatencyMicros is the one-way time in microseconds (latency rows
	// only).
	LatencyMicros float64 `json:"latency_us,omitempty"`
	// GBps is the bandwidth in 10^9 bytes per second (for a latency
	// row, Bytes over the one-way time).
	GBps float64 `json:"gbps"`
	// Allocs is the heap allocations per message on rank 0 (courier's
	// latency rows only).
	Allocs *float64 `json:"allocs,omitempty"`
}

// CollRecord is one collective row.
type CollRecord struct {
	// Name is the collective, one of Collectives.
	Name string `json:"name"`
	// Bytes is the size the call stands for (see CollConfig.Sizes).
	Bytes int `json:"bytes"`
	// TimeMicros is the time per call in microseconds, the slowest
	// rank's.
	TimeMicros float64 `json:"time_us"`
	// AlgBW and BusBW are as in CollRow, in GB/s.
	AlgBW float64 `json:"algbw_gbps"`
	BusBW float64 `json:"busbw_gbps"`
	// Allocs is the heap allocations per call on rank 0 (courier only).
	Allocs *float64 `json:"allocs,omitempty"`
}

// micros is d in microseconds.
func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// Record is r as a JSON row.
func (r Row) Record() P2PRecord {
	rec := P2PRecord{Kind: r.Kind, Bytes: r.Bytes, GBps: r.GBps}
	if r.Kind == "latency" {
		allocs := r.Allocs
		rec.LatencyMicros, rec.Allocs = micros(r.Latency), &allocs
	}
	return rec
}

// Record is r as a JSON row.
func (r CollRow) Record() CollRecord {
	allocs := r.Allocs
	return CollRecord{Name: r.Kind, Bytes: r.Bytes, TimeMicros: micros(r.Time), AlgBW: r.AlgBW, BusBW: r.BusBW, Allocs: &allocs}
}

// WriteJSON writes d to w, indented, with a final newline.
func WriteJSON(w io.Writer, d *Document) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadJSON reads one document from r and checks it: the schema, a kind
// and a size on every row, and figures that are numbers.
func ReadJSON(r io.Reader) (*Document, error) {
	dec := json.NewDecoder(r)
	var d Document
	if err := dec.Decode(&d); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	if d.Schema != Schema {
		return nil, fmt.Errorf("schema %q, want %q", d.Schema, Schema)
	}
	for i, p := range d.P2P {
		if p.Kind != "latency" && p.Kind != "bandwidth" {
			return nil, fmt.Errorf("p2p row %d: kind %q, want latency or bandwidth", i, p.Kind)
		}
		if p.Bytes < 0 || p.GBps < 0 || p.LatencyMicros < 0 {
			return nil, fmt.Errorf("p2p row %d: negative figure", i)
		}
	}
	for i, c := range d.Coll {
		if strings.TrimSpace(c.Name) == "" || c.Bytes < 0 || c.TimeMicros < 0 {
			return nil, fmt.Errorf("coll row %d: no name or a negative figure", i)
		}
	}
	return &d, nil
}

// ReadFile reads the document in the file at path; errors name the file.
func ReadFile(path string) (*Document, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := ReadJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}
