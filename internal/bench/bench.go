// Package bench measures point-to-point latency and bandwidth between ranks
// 0 and 1 of a job, in the patterns the programs it is compared with use,
// so courier's figures sit beside theirs: latency is half a blocking
// ping-pong round trip (both patterns); bandwidth is, in the OSU pattern
// (MPI, Gloo), windows of non-blocking sends of one size, each window
// closed by a one-byte acknowledgement, and in the stream pattern
// (bench/nccl/p2p.c), one long run of back-to-back non-blocking sends,
// timed on both ranks, the slower counting, and in the both pattern, the
// stream pattern in both directions at once (each rank sends the run to
// the other while it receives the other's, into a buffer of its own): the
// figure is per direction, as bench/cuda/ipc.c's "both" is.
package bench

import (
	"cmp"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/courier-mp/courier/cuda"
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
	// number of iterations (the stream patterns move up to 8 budgets'
	// worth, in at most 200 sends).
	Budget int64
	// LatencyTime is about how long the timed part of each latency
	// measurement takes (0: DefaultLatencyTime).
	LatencyTime time.Duration
	// Pattern is "osu" (the default), "stream" or "both" (see the package
	// doc).
	Pattern string
	// Device makes the buffers GPU memory (cuda.Alloc on the rank's GPU)
	// instead of host memory.
	Device bool
	// Progress, if not nil, is called on rank 0 before each figure is
	// measured: what (a row, "latency 4 KiB"), and which figure of how
	// many (1 to Reps). A command shows it while a long run goes on.
	Progress func(what string, figure, figures int)
}

// Patterns lists the values of Config.Pattern.
var Patterns = []string{"osu", "stream", "both"}

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
	// Allocs is the number of heap allocations per message on rank 0
	// (Kind "latency": blocking Send and Recv in steady state).
	Allocs float64
}

// Run measures between ranks 0 and 1 of c; other ranks wait at the
// barriers. Rank 0 gets the rows; the others get nil. If emit is not nil,
// rank 0 also hands it each row as soon as it is measured.
func Run(c *mp.Comm, cfg Config, emit func(Row)) ([]Row, error) {
	if c.Size() < 2 {
		return nil, fmt.Errorf("bench needs 2 ranks, the job has %d", c.Size())
	}
	if cfg.Pattern == "" {
		cfg.Pattern = "osu"
	}
	if !slices.Contains(Patterns, cfg.Pattern) {
		return nil, fmt.Errorf("unknown pattern %q (have %v)", cfg.Pattern, Patterns)
	}
	if cfg.LatencyTime < 0 {
		return nil, fmt.Errorf("latency time %v: want a positive duration, or 0 for %v", cfg.LatencyTime, DefaultLatencyTime)
	}
	largest := slices.Max(append(slices.Clone(cfg.LatencySizes), append(cfg.BandwidthSizes, 1)...))
	m, err := newMem(c, largest, cfg.Device)
	if err != nil {
		return nil, err
	}
	defer m.free()
	var back *mem // the both pattern's receive buffer
	if cfg.Pattern == "both" {
		if back, err = newMem(c, largest, cfg.Device); err != nil {
			return nil, err
		}
		defer back.free()
	}
	var rows []Row
	if len(cfg.LatencySizes) > 0 {
		// Untimed round trips at the first size, so that the first row is
		// not the slowest for being first (the runtime's and the
		// transport's first moments: 0.1-0.2 µs more at 1 B over shared
		// memory, whatever the size); bench/mpi/p2p.c does the same. A
		// run whose rows are shorter than that warms up as long as a row.
		n := cfg.LatencySizes[0]
		warm := min(WarmupTime, cmp.Or(cfg.LatencyTime, DefaultLatencyTime))
		if _, _, err := latency(c, m.sub(n), iters(cfg.Budget/16, n, 1), warm); err != nil {
			return nil, err
		}
	}
	for _, n := range cfg.LatencySizes {
		var allocs float64
		d, err := median(cfg.Reps, progress(c, cfg.Progress, "latency", n), func() (time.Duration, error) {
			d, a, err := latency(c, m.sub(n), iters(cfg.Budget/16, n, 1), cmp.Or(cfg.LatencyTime, DefaultLatencyTime))
			allocs = a
			return d, err
		})
		if err != nil {
			return nil, err
		}
		rows = add(c, rows, emit, Row{Kind: "latency", Bytes: n, Latency: d, GBps: float64(n) / d.Seconds() / 1e9, Allocs: allocs})
	}
	for _, n := range cfg.BandwidthSizes {
		var (
			d     time.Duration
			moved int64
			err   error
		)
		if cfg.Pattern != "osu" {
			// 200 sends as bench/nccl/p2p.c makes, fewer from 40 MiB
			// (8 budgets' worth: 8 GiB with the default budget), at
			// least 3.
			count := int(min(max(8*cfg.Budget/int64(max(n, 1)), 3), 200))
			var in *mem
			if back != nil {
				in = back.sub(n)
			}
			if _, err = stream(c, m.sub(n), in, 3); err == nil { // warm up
				d, err = median(cfg.Reps, progress(c, cfg.Progress, "bandwidth", n),
					func() (time.Duration, error) { return stream(c, m.sub(n), in, count) })
			}
			moved = int64(n) * int64(count)
		} else {
			rounds := iters(cfg.Budget, n, cfg.Window)
			d, err = median(cfg.Reps, progress(c, cfg.Progress, "bandwidth", n),
				func() (time.Duration, error) { return bandwidth(c, m.sub(n), cfg.Window, rounds) })
			moved = int64(n) * int64(cfg.Window) * int64(rounds)
		}
		if err != nil {
			return nil, err
		}
		rows = add(c, rows, emit, Row{Kind: "bandwidth", Bytes: n, GBps: float64(moved) / d.Seconds() / 1e9})
	}
	if c.Rank() != 0 {
		return nil, nil
	}
	return rows, nil
}

// add appends r to rows and, on rank 0, hands it to emit.
func add(c *mp.Comm, rows []Row, emit func(Row), r Row) []Row {
	if emit != nil && c.Rank() == 0 {
		emit(r)
	}
	return append(rows, r)
}

// mem is the benchmark's buffer: host memory, or device memory.
type mem struct {
	host []byte
	dev  cuda.Slice[byte]
	gpu  bool
}

// newMem allocates n bytes of the memory cfg asks for.
func newMem(c *mp.Comm, n int, device bool) (*mem, error) {
	if !device {
		// Written, as bench/mpi/p2p.c memsets its buffer, so that both
		// move pages the process has touched.
		host := make([]byte, n)
		for i := range host {
			host[i] = 1
		}
		return &mem{host: host}, nil
	}
	d, err := c.Device()
	if err != nil {
		return nil, err
	}
	s, err := cuda.Alloc[byte](d, int64(max(n, 1)))
	if err != nil {
		return nil, err
	}
	return &mem{dev: s, gpu: true}, nil
}

func (m *mem) free() {
	if m.gpu {
		m.dev.Free()
	}
}

// sub returns the first n bytes.
func (m *mem) sub(n int) *mem {
	if !m.gpu {
		return &mem{host: m.host[:n]}
	}
	s, _ := m.dev.Sub(0, int64(n)) // n is within the allocation
	return &mem{dev: s, gpu: true}
}

func (m *mem) send(c *mp.Comm, dest, tag int) error {
	if m.gpu {
		return mp.Send(c, m.dev, dest, tag)
	}
	return mp.Send(c, m.host, dest, tag)
}

func (m *mem) recv(c *mp.Comm, src, tag int) error {
	var err error
	if m.gpu {
		_, err = mp.Recv(c, m.dev, src, tag)
	} else {
		_, err = mp.Recv(c, m.host, src, tag)
	}
	return err
}

func (m *mem) isend(c *mp.Comm, dest, tag int) *mp.Request {
	if m.gpu {
		return mp.Isend(c, m.dev, dest, tag)
	}
	return mp.Isend(c, m.host, dest, tag)
}

func (m *mem) irecv(c *mp.Comm, src, tag int) *mp.Request {
	if m.gpu {
		return mp.Irecv(c, m.dev, src, tag)
	}
	return mp.Irecv(c, m.host, src, tag)
}

// iters sizes a loop so it moves about budget bytes, at least 3 and at
// most 20000 times.
func iters(budget int64, size, per int) int {
	n := budget / int64(max(1, size*per))
	return int(min(max(n, 3), 20000))
}

// median measures f reps times (at least once) and returns the median,
// calling each (if not nil) before each measurement with its number,
// from 1, and how many there are.
func median(reps int, each func(figure, figures int), f func() (time.Duration, error)) (time.Duration, error) {
	ds := make([]time.Duration, 0, reps)
	for i := range max(1, reps) {
		if each != nil {
			each(i+1, max(1, reps))
		}
		d, err := f()
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

// progress returns the per-figure hook of a row of kind and size for
// median: report's, on rank 0; nil elsewhere or without report.
func progress(c *mp.Comm, report func(string, int, int), kind string, size int) func(int, int) {
	if report == nil || c.Rank() != 0 {
		return nil
	}
	what := kind + " " + SizeName(size)
	return func(figure, figures int) { report(what, figure, figures) }
}

// DefaultLatencyTime is how long the timed part of a latency measurement
// takes when Config.LatencyTime is 0 (see pingPong).
const DefaultLatencyTime = 2 * time.Second

// WarmupTime is how long the untimed ping-pong before the first latency
// row lasts, or as long as one row (Config.LatencyTime) where that is
// shorter.
const WarmupTime = 250 * time.Millisecond

// latencyChunks: no chunk of a latency measurement's round trips is
// planned to take more than 1/latencyChunks of its budget (see pingPong).
const latencyChunks = 8

// latency returns the one-way time of a blocking ping-pong of buf, and the
// heap allocations per message on this rank, from at most iters round
// trips of about budget together (see pingPong).
func latency(c *mp.Comm, buf *mem, iters int, budget time.Duration) (time.Duration, float64, error) {
	roundTrip := func() error {
		switch c.Rank() {
		case 0:
			if err := buf.send(c, 1, 1); err != nil {
				return err
			}
			return buf.recv(c, 1, 1)
		case 1:
			if err := buf.recv(c, 0, 1); err != nil {
				return err
			}
			return buf.send(c, 0, 1)
		}
		return nil
	}
	return pingPong(c, roundTrip, iters, budget)
}

// pingPong times at most iters calls of roundTrip (one round trip between
// ranks 0 and 1) after a warm-up, about budget's worth of them (at least
// 10), and returns half the time one took and the heap allocations per
// message on this rank.
//
// The timed round trips run in chunks, and only the chunks are timed:
// before each, rank 0 tells rank 1 how many round trips it has (0: none,
// the end), sized from the time those before took: twice the last chunk at
// most, starting from 10, and never more than the budget left, or a
// latencyChunks-th of the budget, at the last chunk's pace. A machine that slows down
// after the warm-up (other programs start) so stretches one chunk, not
// the whole measurement: an iteration count fixed from the warm-up once
// made a 2-second measurement take 40.
func pingPong(c *mp.Comm, roundTrip func() error, iters int, budget time.Duration) (time.Duration, float64, error) {
	if err := mp.Barrier(c); err != nil {
		return 0, 0, err
	}
	warm := min(iters/10+1, 100)
	start := time.Now()
	for range warm {
		if err := roundTrip(); err != nil {
			return 0, 0, err
		}
	}
	per := time.Since(start) / time.Duration(warm) // rank 0's latest pace
	var (
		timed   time.Duration
		done    int64
		mallocs uint64
		ms      runtime.MemStats
	)
	left, last := int64(iters), int64(5)
	next := []int64{0}
	for {
		if c.Rank() == 0 {
			next[0] = 0
			if left > 0 && (timed < budget || done < 10) {
				per := max(per, 1)
				n := min(left, 2*last, max(1, int64((budget-timed)/per)), max(1, int64(budget/latencyChunks/per)))
				next[0] = max(n, min(left, 10-done))
			}
			if err := mp.Send(c, next, 1, 5); err != nil {
				return 0, 0, err
			}
		} else if _, err := mp.Recv(c, next, 0, 5); err != nil {
			return 0, 0, err
		}
		n := next[0]
		if n == 0 {
			break
		}
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		start := time.Now()
		for range n {
			if err := roundTrip(); err != nil {
				return 0, 0, err
			}
		}
		took := time.Since(start)
		runtime.ReadMemStats(&ms)
		mallocs += ms.Mallocs - before
		timed, done, left, last = timed+took, done+n, left-n, n
		per = took / time.Duration(n)
	}
	if done == 0 {
		return 0, 0, nil
	}
	return timed / time.Duration(2*done), float64(mallocs) / float64(2*done), nil
}

// bandwidth returns the time rank 0 took to send rounds windows of window
// messages of buf, each window acknowledged.
func bandwidth(c *mp.Comm, buf *mem, window, rounds int) (time.Duration, error) {
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
				reqs[i] = buf.isend(c, 1, 2)
			}
			if err := mp.WaitAll(reqs...); err != nil {
				return 0, err
			}
			if _, err := mp.Recv(c, ack, 1, 3); err != nil {
				return 0, err
			}
		case 1:
			for i := range reqs {
				reqs[i] = buf.irecv(c, 0, 2)
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

// stream returns the time count back-to-back messages of buf take from
// rank 0 to rank 1: each rank posts them all (Isend or Irecv) and waits
// for them all; the slower rank's time counts (rank 1 reports its own).
// With in (the both pattern), rank 1 also sends count messages of buf to
// rank 0 and rank 0 receives them into in, all at once.
func stream(c *mp.Comm, buf, in *mem, count int) (time.Duration, error) {
	n := count
	if in != nil {
		n *= 2
	}
	reqs := make([]*mp.Request, 0, n)
	if err := mp.Barrier(c); err != nil {
		return 0, err
	}
	start := time.Now()
	for range count {
		switch c.Rank() {
		case 0:
			if in != nil {
				reqs = append(reqs, in.irecv(c, 1, 6))
			}
			reqs = append(reqs, buf.isend(c, 1, 2))
		case 1:
			if in != nil {
				reqs = append(reqs, in.irecv(c, 0, 2))
				reqs = append(reqs, buf.isend(c, 0, 6))
			} else {
				reqs = append(reqs, buf.irecv(c, 0, 2))
			}
		}
	}
	if err := mp.WaitAll(reqs...); err != nil {
		return 0, err
	}
	d := time.Since(start)
	theirs := []int64{int64(d)}
	switch c.Rank() {
	case 0:
		if _, err := mp.Recv(c, theirs, 1, 4); err != nil {
			return 0, err
		}
		d = max(d, time.Duration(theirs[0]))
	case 1:
		if err := mp.Send(c, theirs, 0, 4); err != nil {
			return 0, err
		}
	}
	return d, nil
}

// Header writes the title and column names of the table of
// docs/benchmarks.md; init, if not 0, is how long mp.Init took on rank 0.
func Header(w io.Writer, backend string, cfg Config, init time.Duration) {
	memory := "host"
	if cfg.Device {
		memory = "device"
	}
	pattern := cfg.Pattern
	if pattern == "" {
		pattern = "osu"
	}
	fmt.Fprintf(w, "# courier bench, %s backend, %s memory, %s pattern, ranks 0 and 1\n", backend, memory, pattern)
	fmt.Fprintf(w, "%-10s %12s %14s %10s %11s\n", "kind", "bytes", "latency (µs)", "GB/s", "allocs/msg")
	if init > 0 {
		fmt.Fprintf(w, "%-10s %12s %14.1f %10s %11s\n", "init", "-", float64(init.Nanoseconds())/1e3, "-", "-")
	}
}

// PrintRow writes one row of the table.
func PrintRow(w io.Writer, r Row) {
	lat, allocs := "-", "-"
	if r.Kind == "latency" {
		lat = fmt.Sprintf("%.2f", float64(r.Latency.Nanoseconds())/1e3)
		allocs = fmt.Sprintf("%.2f", r.Allocs)
	}
	fmt.Fprintf(w, "%-10s %12d %14s %10.3f %11s\n", r.Kind, r.Bytes, lat, r.GBps, allocs)
}
