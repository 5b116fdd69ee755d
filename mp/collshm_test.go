package mp_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// The collectives through shared memory: the host backend, every rank on
// this host (the conformance suite over "host" runs them too, for every
// type and operator, in place and not).

// onAll runs f on every rank at once and returns the ranks' errors.
func onAll(comms []*mp.Comm, f func(c *mp.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errs
}

// TestSharedCollectivesTaken: small Allreduce, Reduce, Bcast and
// Allgather, and Barrier, run through shared memory, large ones and the collectives it
// does not take (ReduceScatter, Alltoall) over point-to-point messages;
// over the tcp backend nothing does.
func TestSharedCollectivesTaken(t *testing.T) {
	const np = 4
	cases := []struct {
		name   string
		bytes  int
		shared bool
		tcp    bool // run over the tcp backend too: never shared there
	}{
		{"allreduce", 8, true, true}, {"allreduce", 8 << 10, true, false}, {"allreduce", 1 << 20, false, false},
		{"reduce", 8, true, false}, {"reduce", 1 << 20, false, false},
		{"bcast", 8, true, true}, {"bcast", 64 << 10, true, false}, {"bcast", 1 << 20, false, false},
		{"allgather", 8, true, true}, {"allgather", 64 << 10, true, false}, {"allgather", 256 << 10, false, false},
		{"barrier", 0, true, true},
		{"reducescatter", 8, false, false}, {"alltoall", 8, false, false},
	}
	for _, backend := range []string{"host", "tcp"} {
		comms := openRanks(t, np, backend)
		for _, cs := range cases {
			if backend == "tcp" && !cs.tcp {
				continue
			}
			n := cs.bytes / 4
			errs := onAll(comms, func(c *mp.Comm) error {
				before := mp.SharedCollectives(c)
				var err error
				send, recv := make([]float32, np*n), make([]float32, np*n)
				switch cs.name {
				case "allreduce":
					err = mp.Allreduce(c, send[:n], recv[:n], mp.Sum)
				case "reduce":
					err = mp.Reduce(c, send[:n], recv[:n], mp.Sum, 1)
				case "bcast":
					err = mp.Bcast(c, send[:n], 2)
				case "allgather":
					err = mp.Allgather(c, send[:n], recv)
				case "reducescatter":
					err = mp.ReduceScatter(c, send, recv[:n], mp.Sum)
				case "alltoall":
					err = mp.Alltoall(c, send, recv)
				case "barrier":
					err = mp.Barrier(c)
				}
				if err != nil {
					return err
				}
				want := int64(0)
				if cs.shared && backend == "host" {
					want = 1
				}
				if got := mp.SharedCollectives(c) - before; got != want {
					return fmt.Errorf("%d collectives through shared memory, want %d", got, want)
				}
				return nil
			})
			for r, err := range errs {
				assert.NoError(t, err, "%s: %s of %d bytes per rank, rank %d", backend, cs.name, cs.bytes, r)
			}
		}
	}
}

// TestSharedAllreduceSameBits: an Allreduce of values whose sum depends
// on the order of combining gives every rank the same bits, those of the
// combination in rank order, for float32, float64, Float16 and BFloat16,
// in place and not.
func TestSharedAllreduceSameBits(t *testing.T) {
	const np, n = 4, 257
	comms := openRanks(t, np, "host")
	check := func(name string, f func(c *mp.Comm, inPlace bool) (got, want []uint64, err error)) {
		for _, inPlace := range []bool{false, true} {
			results := make([][]uint64, np)
			errs := onAll(comms, func(c *mp.Comm) error {
				before := mp.SharedCollectives(c)
				got, want, err := f(c, inPlace)
				if err != nil {
					return err
				}
				if mp.SharedCollectives(c) == before {
					return errors.New("not through shared memory")
				}
				results[c.Rank()] = got
				if !slices.Equal(got, want) {
					return fmt.Errorf("not the combination in rank order: first elements %#x, want %#x", got[:2], want[:2])
				}
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "%s (in place %v), rank %d", name, inPlace, r)
			}
			for r := 1; r < np; r++ {
				require.Equal(t, results[0], results[r], "%s (in place %v): rank %d's bits differ from rank 0's", name, inPlace, r)
			}
		}
	}
	input := func(r int) []float64 {
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		v := make([]float64, n)
		for i := range v {
			v[i] = (rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(12)-6))
		}
		return v
	}
	check("float32", func(c *mp.Comm, inPlace bool) ([]uint64, []uint64, error) {
		conv := func(r int) []float32 {
			out := make([]float32, n)
			for i, x := range input(r) {
				out[i] = float32(x)
			}
			return out
		}
		want := conv(0)
		for r := 1; r < np; r++ {
			for i, x := range conv(r) {
				want[i] += x
			}
		}
		send := conv(c.Rank())
		recv := send
		if !inPlace {
			recv = make([]float32, n)
		}
		err := mp.Allreduce(c, send, recv, mp.Sum)
		return bits32(recv), bits32(want), err
	})
	check("float64", func(c *mp.Comm, inPlace bool) ([]uint64, []uint64, error) {
		want := input(0)
		for r := 1; r < np; r++ {
			for i, x := range input(r) {
				want[i] += x
			}
		}
		send := input(c.Rank())
		recv := send
		if !inPlace {
			recv = make([]float64, n)
		}
		err := mp.Allreduce(c, send, recv, mp.Sum)
		return bits64(recv), bits64(want), err
	})
	check("Float16", func(c *mp.Comm, inPlace bool) ([]uint64, []uint64, error) {
		conv := func(r int) []mp.Float16 {
			out := make([]mp.Float16, n)
			for i, x := range input(r) {
				out[i] = mp.Float16Of(float32(x))
			}
			return out
		}
		want := conv(0)
		for r := 1; r < np; r++ {
			for i, x := range conv(r) {
				want[i] = mp.Float16Of(want[i].Float32() + x.Float32())
			}
		}
		send := conv(c.Rank())
		recv := send
		if !inPlace {
			recv = make([]mp.Float16, n)
		}
		err := mp.Allreduce(c, send, recv, mp.Sum)
		return bits16(recv), bits16(want), err
	})
	check("BFloat16", func(c *mp.Comm, inPlace bool) ([]uint64, []uint64, error) {
		conv := func(r int) []mp.BFloat16 {
			out := make([]mp.BFloat16, n)
			for i, x := range input(r) {
				out[i] = mp.BFloat16Of(float32(x))
			}
			return out
		}
		want := conv(0)
		for r := 1; r < np; r++ {
			for i, x := range conv(r) {
				want[i] = mp.BFloat16Of(want[i].Float32() * x.Float32())
			}
		}
		send := conv(c.Rank())
		recv := send
		if !inPlace {
			recv = make([]mp.BFloat16, n)
		}
		err := mp.Allreduce(c, send, recv, mp.Prod)
		return bits16(recv), bits16(want), err
	})
}

func bits32(v []float32) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = uint64(math.Float32bits(x))
	}
	return out
}

func bits64(v []float64) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = math.Float64bits(x)
	}
	return out
}

func bits16[E ~uint16](v []E) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = uint64(x)
	}
	return out
}

// TestSharedCollectivesAllocs: in steady state a collective through
// shared memory allocates nothing, on any rank (courier bench -coll
// reports 0.00 allocs/op).
func TestSharedCollectivesAllocs(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	const np, n, iters = 4, 64, 500
	comms := openRanks(t, np, "host")
	bufs := make([][2][]float32, np)
	for i := range bufs {
		bufs[i] = [2][]float32{make([]float32, n), make([]float32, np*n)}
	}
	ops := map[string]func(c *mp.Comm) error{
		"allreduce": func(c *mp.Comm) error { b := bufs[c.Rank()]; return mp.Allreduce(c, b[0], b[1][:n], mp.Sum) },
		"reduce":    func(c *mp.Comm) error { b := bufs[c.Rank()]; return mp.Reduce(c, b[0], b[1][:n], mp.Max, 0) },
		"bcast":     func(c *mp.Comm) error { return mp.Bcast(c, bufs[c.Rank()][0], 1) },
		"allgather": func(c *mp.Comm) error { b := bufs[c.Rank()]; return mp.Allgather(c, b[0], b[1]) },
		"barrier":   mp.Barrier,
	}
	for name, op := range ops {
		loop := func(k int) {
			errs := onAll(comms, func(c *mp.Comm) error {
				for range k {
					if err := op(c); err != nil {
						return err
					}
				}
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "%s, rank %d", name, r)
			}
		}
		loop(20) // warm-up
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		loop(iters)
		runtime.ReadMemStats(&after)
		// Allocations are counted over the whole process: onAll's
		// goroutines, and the runtime's and the transport's background
		// (a few per second), stay far below one per call on each rank,
		// which is what an allocation on the collective's path would add.
		got := int(after.Mallocs - before.Mallocs)
		assert.Less(t, got, iters/10, "%s: %d allocations in %d calls on each of %d ranks", name, got, iters, np)
	}
}

// TestSharedCollectiveMismatch: a rank that calls a different collective
// through shared memory (another operator) makes every rank fail with
// ErrMismatch, naming what each called, instead of wrong data.
func TestSharedCollectiveMismatch(t *testing.T) {
	ranktest.RunConfig(t, 3, ranktest.Config{Backend: "host", Options: []mp.Option{mp.WithTimeout(10 * time.Second)}}, func(rt *ranktest.T, c *mp.Comm) {
		op := mp.Sum
		if c.Rank() == 2 {
			op = mp.Max
		}
		v := []int32{1, 2}
		err := mp.Allreduce(c, v, v, op)
		require.ErrorIs(rt, err, mp.ErrMismatch)
		require.ErrorContains(rt, err, "allreduce of 8 bytes of int32 with")
	})
}

// TestSharedBcastRootsDisagree: two ranks that each take the other for a
// Bcast's root both wait for a slot the other never fills; each sees the
// other pass the call and fails with ErrMismatch, not a timeout.
func TestSharedBcastRootsDisagree(t *testing.T) {
	ranktest.RunConfig(t, 2, ranktest.Config{Backend: "host", Options: []mp.Option{mp.WithTimeout(10 * time.Second)}}, func(rt *ranktest.T, c *mp.Comm) {
		v := []float64{1}
		err := mp.Bcast(c, v, 1-c.Rank())
		require.ErrorIs(rt, err, mp.ErrMismatch)
		require.ErrorContains(rt, err, "contributes nothing")
	})
}

// TestSharedCollectiveTimeout: a rank that never calls the collective
// makes the others' calls end with ErrTimeout, listing the collective,
// once the communicator's timeout passes.
func TestSharedCollectiveTimeout(t *testing.T) {
	t.Parallel() // waits more than it computes
	const timeout = 500 * time.Millisecond
	done := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	ended, timedOut := 0, 0
	ranktest.RunConfig(t, 3, ranktest.Config{Backend: "host", Options: []mp.Option{mp.WithTimeout(timeout)}}, func(rt *ranktest.T, c *mp.Comm) {
		if c.Rank() == 1 {
			<-done // calls nothing until the others have given up
			return
		}
		v := []float64{1}
		start := time.Now()
		err := mp.Allreduce(c, v, v, mp.Sum)
		took := time.Since(start)
		mu.Lock()
		if errors.Is(err, mp.ErrTimeout) {
			timedOut++
		}
		if ended++; ended == 2 {
			once.Do(func() { close(done) })
		}
		mu.Unlock()
		// The first to time out aborts, and the other may learn of it
		// from that rank before its own bound passes.
		if !errors.Is(err, mp.ErrPeerLost) {
			require.ErrorIs(rt, err, mp.ErrTimeout)
			assert.ErrorContains(rt, err, "Allreduce (shared memory) of 1 × float64 (called at ", "the report names the collective")
			assert.ErrorContains(rt, err, ") waiting for rank 1", "the report names the rank it waits for")
		}
		assert.GreaterOrEqual(rt, took, timeout/2)
		assert.Less(rt, took, timeout+2*time.Second)
	})
	assert.Positive(t, timedOut, "no rank timed out")
}

// TestLargeCollectiveAllocsAcrossGC: a large Allreduce over point-to-point
// messages borrows megabytes of scratch; garbage collections between the
// calls (which empty sync.Pools) must not make it allocate them again.
func TestLargeCollectiveAllocsAcrossGC(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	const np, n, iters = 2, 1 << 19, 40 // 2 MiB of float32
	comms := openRanks(t, np, "tcp")
	bufs := make([][2][]float32, np)
	for i := range bufs {
		bufs[i] = [2][]float32{make([]float32, n), make([]float32, n)}
	}
	call := func() {
		errs := onAll(comms, func(c *mp.Comm) error {
			b := bufs[c.Rank()]
			return mp.Allreduce(c, b[0], b[1], mp.Sum)
		})
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
		}
	}
	for range 5 {
		call() // warm-up
	}
	var before, after runtime.MemStats
	var bytes uint64
	for range iters {
		runtime.GC()
		runtime.ReadMemStats(&before)
		call()
		runtime.ReadMemStats(&after)
		bytes += after.TotalAlloc - before.TotalAlloc
	}
	// One scratch buffer allocated again would be ≥ 1 MiB.
	assert.Less(t, bytes, uint64(1<<20), "%d bytes allocated in %d calls, each after a collection", bytes, iters)
}

// TestSharedBcastAfterRootLeft: a Bcast's root writes its part and may
// return and close before the other ranks read it (as over buffered
// messages): a rank that calls the Bcast only after every other rank has
// closed still gets the data, and its own collectives that need a rank
// that left end with ErrPeerLost, not a transport that has gone.
func TestSharedBcastAfterRootLeft(t *testing.T) {
	t.Parallel() // waits more than it computes
	comms := openRanks(t, 2, "host")
	v := []float64{42, 43}
	require.NoError(t, mp.Bcast(comms[0], v, 0))
	t0 := time.Now()
	require.NoError(t, comms[0].Close())
	t.Logf("root closed in %v", time.Since(t0))
	got := make([]float64, 2)
	require.NoError(t, mp.Bcast(comms[1], got, 0), "the root's part was written before it closed")
	assert.Equal(t, v, got)
	t0 = time.Now()
	err := mp.Bcast(comms[1], got, 0)
	t.Logf("second Bcast in %v: %v", time.Since(t0), err)
	require.ErrorIs(t, err, mp.ErrPeerLost, "a second Bcast waits for a root that has gone")
}

// TestSharedBcastStreamed: Bcasts whose root writes its slot with
// non-temporal stores (backend/shm's collStreamBcast: from 4 KiB on 2
// ranks, 16 KiB on more) and those beside them deliver the root's bytes,
// call after call, through every slot more than once.
func TestSharedBcastStreamed(t *testing.T) {
	for _, np := range []int{2, 4} {
		comms := openRanks(t, np, "host")
		for _, n := range []int{4095, 4096, 4097, 16<<10 - 1, 16 << 10, 16<<10 + 129, 64 << 10} {
			errs := onAll(comms, func(c *mp.Comm) error {
				buf := make([]byte, n)
				for call := range 20 {
					want := make([]byte, n)
					for i := range want {
						want[i] = byte(i*7 + call*13 + n)
					}
					if c.Rank() == 1 {
						copy(buf, want)
					} else {
						clear(buf)
					}
					before := mp.SharedCollectives(c)
					if err := mp.Bcast(c, buf, 1); err != nil {
						return err
					}
					if mp.SharedCollectives(c) == before {
						return fmt.Errorf("call %d: not through shared memory", call)
					}
					if !bytes.Equal(buf, want) {
						return fmt.Errorf("call %d: wrong bytes", call)
					}
				}
				return nil
			})
			for r, err := range errs {
				assert.NoError(t, err, "%d ranks, %d bytes, rank %d", np, n, r)
			}
		}
	}
}

// TestSharedCollectiveWaitReported: a shared-memory collective that ends
// at once leaves nothing pending, and one whose peer comes late (it is
// handed over from the caller's quick polls to the request's wait) is in
// the pending-operation report while it waits, and still gets the sum.
func TestSharedCollectiveWaitReported(t *testing.T) {
	t.Parallel() // waits more than it computes
	comms := openRanks(t, 2, "host")
	sum := func(c *mp.Comm) ([]float64, error) {
		v := []float64{float64(c.Rank() + 1)}
		err := mp.Allreduce(c, v, v, mp.Sum)
		return v, err
	}
	for range 3 {
		errs := onAll(comms, func(c *mp.Comm) error { _, err := sum(c); return err })
		require.NoError(t, errors.Join(errs...))
	}
	assert.NotContains(t, comms[0].PendingReport(), "shared memory", "a finished collective is reported")

	seen := make(chan string, 1)
	go func() { // rank 1 calls once rank 0's wait is reported, or after 10 s
		deadline := time.Now().Add(10 * time.Second)
		report := ""
		for time.Now().Before(deadline) {
			if report = comms[0].PendingReport(); strings.Contains(report, "Allreduce (shared memory)") {
				break
			}
			time.Sleep(time.Millisecond)
		}
		seen <- report
		_, _ = sum(comms[1])
	}()
	got, err := sum(comms[0])
	require.NoError(t, err)
	assert.Equal(t, []float64{3}, got)
	report := <-seen
	assert.Contains(t, report, "Allreduce (shared memory)", "the waiting collective is not in the report")
	assert.Contains(t, report, "waiting for rank 1")
	assert.NotContains(t, comms[0].PendingReport(), "shared memory", "a finished collective is reported")
}
