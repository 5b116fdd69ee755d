// Package bench measures point-to-point latency and bandwidth between ranks
// 0 and 1 of a job, in the patterns the OSU micro-benchmarks use, so
// courier's figures sit beside MPI's and Gloo's: latency is half a blocking
// ping-pong round trip; bandwidth is windows of non-blocking sends of one
// size, each window closed by a one-byte acknowledgement.
package bench

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/courier-mp/courier/mp"
)

// Config says what to measure.
type Config struct {
	// LatencySizes and BandwidthSizes are message sizes in bytes.
	LatencySizes, BandwidthSizes []int
	// Window is the number of sends in flight per bandwidth window (64).
	Window int
	// Reps is how many times each figure is measured; the median is kept.
	Reps int
	// Budget roughly bounds the bytes moved per measurement, to size the
	// number of iterations.
	Budget int64
}

// Default is the OSU-like configuration of docs/benchmarks.md.
func Default() Config {
	return Config{
		LatencySizes:   []int{1, 4 << 10, 64 << 10, 1 << 20},
		BandwidthSizes: []int{4 << 10, 64 << 10, 1 << 20, 4 << 20, 64 << 20},
		Window:         64,
		Reps:           3,
		Budget:         1 << 30,
	}
}

// Row is one measured figure.
type Row struct {
	Kind  string // "latency" or "bandwidth"
	Bytes int
	// Latency is the one-way time (Kind "latency"); GBps the bandwidth in
	// 10^9 bytes per second (both kinds).
	Latency time.Duration
	GBps    float64
}

// Run measures between ranks 0 and 1 of c; other ranks wait at the
// barriers. Rank 0 gets the rows; the others get nil.
func Run(c *mp.Comm, cfg Config) ([]Row, error) {
	if c.Size() < 2 {
		return nil, fmt.Errorf("bench needs 2 ranks, the job has %d", c.Size())
	}
	var rows []Row
	for _, n := range cfg.LatencySizes {
		d, err := median(cfg.Reps, func() (time.Duration, error) { return latency(c, n, iters(cfg.Budget/16, n, 1)) })
		if err != nil {
			return nil, err
		}
		rows = append(rows, Row{Kind: "latency", Bytes: n, Latency: d, GBps: float64(n) / d.Seconds() / 1e9})
	}
	for _, n := range cfg.BandwidthSizes {
		rounds := iters(cfg.Budget, n, cfg.Window)
		d, err := median(cfg.Reps, func() (time.Duration, error) { return bandwidth(c, n, cfg.Window, rounds) })
		if err != nil {
			return nil, err
		}
		rows = append(rows, Row{Kind: "bandwidth", Bytes: n, GBps: float64(n*cfg.Window*rounds) / d.Seconds() / 1e9})
	}
	if c.Rank() != 0 {
		return nil, nil
	}
	return rows, nil
}

// iters sizes a loop so it moves about budget bytes, at least 3 and at
// most 20000 times.
func iters(budget int64, size, per int) int {
	n := budget / int64(max(1, size*per))
	return int(min(max(n, 3), 20000))
}

func median(reps int, f func() (time.Duration, error)) (time.Duration, error) {
	ds := make([]time.Duration, 0, reps)
	for range max(1, reps) {
		d, err := f()
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

// latency returns the one-way time of a blocking ping-pong of n bytes.
func latency(c *mp.Comm, n, iters int) (time.Duration, error) {
	buf := make([]byte, n)
	if err := mp.Barrier(c); err != nil {
		return 0, err
	}
	warm := min(iters/10+1, 100)
	var start time.Time
	for i := -warm; i < iters; i++ {
		if i == 0 {
			start = time.Now()
		}
		switch c.Rank() {
		case 0:
			if err := mp.Send(c, buf, 1, 1); err != nil {
				return 0, err
			}
			if _, err := mp.Recv(c, buf, 1, 1); err != nil {
				return 0, err
			}
		case 1:
			if _, err := mp.Recv(c, buf, 0, 1); err != nil {
				return 0, err
			}
			if err := mp.Send(c, buf, 0, 1); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start) / time.Duration(2*iters), nil
}

// bandwidth returns the time rank 0 took to send rounds windows of window
// messages of n bytes, each window acknowledged.
func bandwidth(c *mp.Comm, n, window, rounds int) (time.Duration, error) {
	buf := make([]byte, n)
	ack := make([]byte, 1)
	reqs := make([]*mp.Request, window)
	if err := mp.Barrier(c); err != nil {
		return 0, err
	}
	start := time.Now()
	for r := 0; r < rounds; r++ {
		switch c.Rank() {
		case 0:
			for i := range reqs {
				reqs[i] = mp.Isend(c, buf, 1, 2)
			}
			if err := mp.WaitAll(reqs...); err != nil {
				return 0, err
			}
			if _, err := mp.Recv(c, ack, 1, 3); err != nil {
				return 0, err
			}
		case 1:
			for i := range reqs {
				reqs[i] = mp.Irecv(c, buf, 0, 2)
			}
			if err := mp.WaitAll(reqs...); err != nil {
				return 0, err
			}
			if err := mp.Send(c, ack, 0, 3); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start), nil
}

// Print writes rows as the table of docs/benchmarks.md.
func Print(w io.Writer, backend string, rows []Row) {
	fmt.Fprintf(w, "# courier bench, %s backend, ranks 0 and 1\n", backend)
	fmt.Fprintf(w, "%-10s %12s %14s %10s\n", "kind", "bytes", "latency (µs)", "GB/s")
	for _, r := range rows {
		lat := "-"
		if r.Kind == "latency" {
			lat = fmt.Sprintf("%.2f", float64(r.Latency.Nanoseconds())/1e3)
		}
		fmt.Fprintf(w, "%-10s %12d %14s %10.3f\n", r.Kind, r.Bytes, lat, r.GBps)
	}
}
