package bench

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/mp"
)

// Collectives lists what CollConfig.Kinds may name.
var Collectives = []string{"allreduce", "allgather", "alltoall", "reducescatter", "bcast"}

// CollConfig says which collectives to measure (as bench/nccl/coll.c
// measures them in C): float32 elements, Sum, every rank taking part.
type CollConfig struct {
	// Kinds are names from Collectives.
	Kinds []string
	// Sizes are in bytes: for allreduce and bcast the buffer; for
	// allgather the whole receive buffer, for alltoall the whole send
	// buffer, for reducescatter the whole send buffer (each rounded down
	// to a multiple of 4·Size, at least one element per rank).
	Sizes []int
	// Reps is how many figures are measured; the median is kept.
	Reps int
	// Device makes the buffers GPU memory instead of host memory.
	Device bool
	// Progress is as Config's: called on rank 0 before each figure.
	Progress func(what string, figure, figures int)
}

// CollRow is one measured collective.
type CollRow struct {
	Kind  string
	Bytes int
	// Time is one operation's: the blocking call, from its start until
	// it returns, averaged over a run of them, on the slowest rank.
	Time time.Duration
	// AlgBW is Bytes/Time; BusBW is AlgBW times the factor that makes it
	// comparable with a link's bandwidth: 2(N−1)/N for allreduce, (N−1)/N
	// for allgather, alltoall and reducescatter, 1 for bcast.
	AlgBW, BusBW float64
	// Allocs is the number of heap allocations per operation on rank 0.
	Allocs float64
}

// busFactor is the bus bandwidth factor of a collective on n ranks: the
// share of the data each rank's link carries, as a multiple of Bytes.
func busFactor(kind string, n int) float64 {
	switch kind {
	case "allreduce":
		return 2 * float64(n-1) / float64(n)
	case "bcast":
		return 1
	}
	return float64(n-1) / float64(n)
}

// collTarget is about how long one figure takes, and collMaxCalls the
// most calls one makes (a figure of the smallest collectives, a tenth of
// a microsecond each, then takes 10 ms: long enough that a scheduler tick
// or a wake-up of the runtime is a small part of it, as it was not of the
// 2000 calls, a millisecond, that the cap once was).
const (
	collTarget   = 200 * time.Millisecond
	collMaxCalls = 100000
)

// RunColl measures cfg's collectives on every rank of c. Rank 0 gets the
// rows (and emit, if not nil, each as it is measured); the others nil.
func RunColl(c *mp.Comm, cfg CollConfig, emit func(CollRow)) ([]CollRow, error) {
	for _, k := range cfg.Kinds {
		if !slices.Contains(Collectives, k) {
			return nil, fmt.Errorf("unknown collective %q (have %s)", k, strings.Join(Collectives, ", "))
		}
	}
	p := c.Size()
	largest := 4 * p
	for _, n := range cfg.Sizes {
		largest = max(largest, n)
	}
	send, err := newFloats(c, largest/4, cfg.Device)
	if err != nil {
		return nil, err
	}
	defer send.free()
	recv, err := newFloats(c, largest/4, cfg.Device)
	if err != nil {
		return nil, err
	}
	defer recv.free()
	var rows []CollRow
	for _, kind := range cfg.Kinds {
		for _, size := range cfg.Sizes {
			n := size / 4 // elements of the buffer the size names
			if kind != "allreduce" && kind != "bcast" {
				n = max(1, n/p) * p
			}
			n = max(n, 1)
			op := collOp(kind, send, recv, n, p)
			row, err := measureColl(c, op, cfg.Reps, progress(c, cfg.Progress, kind, 4*n))
			if err != nil {
				return nil, fmt.Errorf("%s of %d bytes: %w", kind, 4*n, err)
			}
			row.Kind, row.Bytes = kind, 4*n
			row.AlgBW = float64(row.Bytes) / row.Time.Seconds() / 1e9
			row.BusBW = row.AlgBW * busFactor(kind, p)
			if emit != nil && c.Rank() == 0 {
				emit(row)
			}
			rows = append(rows, row)
		}
	}
	if c.Rank() != 0 {
		return nil, nil
	}
	return rows, nil
}

// collOp returns the call of one collective of n elements (the size its
// row names) on p ranks.
func collOp(kind string, send, recv *floats, n, p int) func(c *mp.Comm) error {
	switch kind {
	case "allreduce":
		return func(c *mp.Comm) error { return send.allreduce(c, recv, n) }
	case "allgather":
		return func(c *mp.Comm) error { return send.allgather(c, recv, n/p, n) }
	case "alltoall":
		return func(c *mp.Comm) error { return send.alltoall(c, recv, n) }
	case "reducescatter":
		return func(c *mp.Comm) error { return send.reduceScatter(c, recv, n, n/p) }
	}
	return func(c *mp.Comm) error { return send.bcast(c, n) }
}

// measureColl times op: one call, then four more to size a run of about
// collTarget (5 to collMaxCalls calls, the slowest rank's estimate), then
// Reps runs, each started together (a barrier and a one-element
// Allreduce) and timed on every rank, the slowest counting; the median
// run is kept.
func measureColl(c *mp.Comm, op func(*mp.Comm) error, reps int, each func(int, int)) (CollRow, error) {
	var row CollRow
	if err := op(c); err != nil {
		return row, err
	}
	start := time.Now()
	for range 4 {
		if err := op(c); err != nil {
			return row, err
		}
	}
	per := []float64{time.Since(start).Seconds() / 4}
	if err := mp.Allreduce(c, per, per, mp.Max); err != nil {
		return row, err
	}
	iters := int(min(max(collTarget.Seconds()/max(per[0], 1e-9), 5), collMaxCalls))
	sync := []float32{1}
	d, err := median(reps, each, func() (time.Duration, error) {
		if err := mp.Barrier(c); err != nil {
			return 0, err
		}
		if err := mp.Allreduce(c, sync, sync, mp.Sum); err != nil {
			return 0, err
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		for range iters {
			if err := op(c); err != nil {
				return 0, err
			}
		}
		elapsed := time.Since(start)
		// The count is read before the slice below is made: read after
		// it, the harness's own allocation showed as 0.1-0.2 a call
		// where a figure has 5-10 calls (16 MiB on 4 ranks).
		runtime.ReadMemStats(&after)
		row.Allocs = float64(after.Mallocs-before.Mallocs) / float64(iters)
		took := []float64{elapsed.Seconds()}
		if err := mp.Allreduce(c, took, took, mp.Max); err != nil {
			return 0, err
		}
		return time.Duration(took[0] / float64(iters) * 1e9), nil
	})
	row.Time = d
	return row, err
}

// floats is a buffer of float32s in host or device memory.
type floats struct {
	host []float32
	dev  cuda.Slice[float32]
	gpu  bool
}

func newFloats(c *mp.Comm, n int, device bool) (*floats, error) {
	if !device {
		return &floats{host: make([]float32, n)}, nil
	}
	d, err := c.Device()
	if err != nil {
		return nil, err
	}
	s, err := cuda.Alloc[float32](d, int64(max(n, 1)))
	if err != nil {
		return nil, err
	}
	return &floats{dev: s, gpu: true}, nil
}

func (f *floats) free() {
	if f.gpu {
		f.dev.Free()
	}
}

// dsub is device elements [0, n): within the allocation.
func (f *floats) dsub(n int) cuda.Slice[float32] {
	s, _ := f.dev.Sub(0, int64(n))
	return s
}

func (f *floats) allreduce(c *mp.Comm, out *floats, n int) error {
	if f.gpu {
		return mp.Allreduce(c, f.dsub(n), out.dsub(n), mp.Sum)
	}
	return mp.Allreduce(c, f.host[:n], out.host[:n], mp.Sum)
}

func (f *floats) allgather(c *mp.Comm, out *floats, each, n int) error {
	if f.gpu {
		return mp.Allgather(c, f.dsub(each), out.dsub(n))
	}
	return mp.Allgather(c, f.host[:each], out.host[:n])
}

func (f *floats) alltoall(c *mp.Comm, out *floats, n int) error {
	if f.gpu {
		return mp.Alltoall(c, f.dsub(n), out.dsub(n))
	}
	return mp.Alltoall(c, f.host[:n], out.host[:n])
}

func (f *floats) reduceScatter(c *mp.Comm, out *floats, n, each int) error {
	if f.gpu {
		return mp.ReduceScatter(c, f.dsub(n), out.dsub(each), mp.Sum)
	}
	return mp.ReduceScatter(c, f.host[:n], out.host[:each], mp.Sum)
}

func (f *floats) bcast(c *mp.Comm, n int) error {
	if f.gpu {
		return mp.Bcast(c, f.dsub(n), 0)
	}
	return mp.Bcast(c, f.host[:n], 0)
}

// CollHeader writes the title and column names of the collectives'
// table (the rows of bench/nccl/coll.c); init, if not 0, is how long
// mp.Init took on rank 0.
func CollHeader(w io.Writer, backend string, ranks int, cfg CollConfig, init time.Duration) {
	memory := "host"
	if cfg.Device {
		memory = "device"
	}
	fmt.Fprintf(w, "# courier bench, %s backend, %d ranks, %s memory, float32 sum, each operation waited for; time: the slowest rank's, median of %d figures\n",
		backend, ranks, memory, max(cfg.Reps, 1))
	fmt.Fprintf(w, "# %-11s %12s %12s %12s %12s %9s\n", "name", "bytes", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "allocs/op")
	if init > 0 {
		fmt.Fprintf(w, "%-13s %12s %12.1f\n", "init", "-", float64(init.Nanoseconds())/1e3)
	}
}

// PrintCollRow writes one row of the collectives' table.
func PrintCollRow(w io.Writer, r CollRow) {
	fmt.Fprintf(w, "%-13s %12d %12.2f %12.2f %12.2f %9.2f\n", r.Kind, r.Bytes, float64(r.Time.Nanoseconds())/1e3, r.AlgBW, r.BusBW, r.Allocs)
}
