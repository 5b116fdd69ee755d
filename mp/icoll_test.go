package mp_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/courier-mp/courier/mp"
)

// The non-blocking collectives, in process over tcp and host (shared
// memory for the small ones): each against its blocking form on random
// data, several in flight at once waited in reverse order, mixed with
// blocking collectives and point-to-point messages, WaitAny and WaitSome
// over them, and a peer that leaves mid-collective.

// icollInput is rank r's random input of n float64s for round k.
func icollInput(r, k, n int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(r), uint64(k)))
	v := make([]float64, n)
	for i := range v {
		v[i] = (rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(8)-4))
	}
	return v
}

// sameBits reports whether a and b hold the same float64s, bit for bit.
func sameBits(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) })
}

// icollCase is one collective run both ways: blocking fills want, then
// start starts the non-blocking form into got.
type icollCase struct {
	name     string
	blocking func(c *mp.Comm, in, out []float64) error
	start    func(c *mp.Comm, in, out []float64) (*mp.Request, error)
	out      func(n, p int) int // the length of out for inputs of n
}

var icollCases = []icollCase{
	{"bcast", func(c *mp.Comm, in, out []float64) error { copy(out, in); return mp.Bcast(c, out, 1) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) { copy(out, in); return mp.Ibcast(c, out, 1) },
		func(n, p int) int { return n }},
	{"reduce", func(c *mp.Comm, in, out []float64) error { return mp.Reduce(c, in, rootOnly(c, out), mp.Sum, 0) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) {
			return mp.Ireduce(c, in, rootOnly(c, out), mp.Sum, 0)
		},
		func(n, p int) int { return n }},
	{"allreduce", func(c *mp.Comm, in, out []float64) error { return mp.Allreduce(c, in, out, mp.Sum) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) { return mp.Iallreduce(c, in, out, mp.Sum) },
		func(n, p int) int { return n }},
	{"allreduce-max", func(c *mp.Comm, in, out []float64) error { return mp.Allreduce(c, in, out, mp.Max) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) { return mp.Iallreduce(c, in, out, mp.Max) },
		func(n, p int) int { return n }},
	{"allgather", func(c *mp.Comm, in, out []float64) error { return mp.Allgather(c, in, out) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) { return mp.Iallgather(c, in, out) },
		func(n, p int) int { return n * p }},
	{"reducescatter", func(c *mp.Comm, in, out []float64) error { return mp.ReduceScatter(c, in, out, mp.Sum) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) {
			return mp.IreduceScatter(c, in, out, mp.Sum)
		},
		func(n, p int) int { return n / p }},
	{"alltoall", func(c *mp.Comm, in, out []float64) error { return mp.Alltoall(c, in, out) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) { return mp.Ialltoall(c, in, out) },
		func(n, p int) int { return n }},
}

// rootOnly is out at rank 0 (Reduce's root) and nil elsewhere.
func rootOnly(c *mp.Comm, out []float64) []float64 {
	if c.Rank() == 0 {
		return out
	}
	return nil
}

func icollRanks() int {
	if raceOn {
		return 3
	}
	return 4
}

// TestIcollMatchesBlocking: every non-blocking collective gives what its
// blocking form gives, bit for bit, on random data, small (shared memory on
// host) and large (point-to-point rings), on tcp and host.
func TestIcollMatchesBlocking(t *testing.T) {
	p := icollRanks()
	for _, be := range []string{"tcp", "host"} {
		comms := openRanks(t, p, be)
		for _, n := range []int{0, p, 12 * p, 40000 * p} {
			for k, tc := range icollCases {
				t.Run(fmt.Sprintf("%s/%s/%d", be, tc.name, n), func(t *testing.T) {
					errs := onAll(comms, func(c *mp.Comm) error {
						in := icollInput(c.Rank(), k, n)
						want, got := make([]float64, tc.out(n, p)), make([]float64, tc.out(n, p))
						if err := tc.blocking(c, in, want); err != nil {
							return err
						}
						req, err := tc.start(c, in, got)
						if err != nil {
							return err
						}
						st, err := req.Wait()
						if err != nil {
							return err
						}
						if st != (mp.Status{}) {
							return fmt.Errorf("status %+v, want zero", st)
						}
						if tc.name == "reduce" && c.Rank() != 0 {
							return nil
						}
						if !sameBits(got, want) {
							return fmt.Errorf("rank %d: non-blocking %v…, blocking %v…", c.Rank(), head(got), head(want))
						}
						return nil
					})
					for _, err := range errs {
						if err != nil {
							t.Fatal(err)
						}
					}
				})
			}
		}
	}
}

func head(v []float64) []float64 { return v[:min(len(v), 4)] }

// TestIcollInFlight: every kind started at once, with a blocking
// Allreduce and point-to-point messages between them, waited in reverse
// order; then a batch collected with WaitAny and one with WaitSome.
func TestIcollInFlight(t *testing.T) {
	p := icollRanks()
	for _, be := range []string{"tcp", "host"} {
		t.Run(be, func(t *testing.T) {
			comms := openRanks(t, p, be)
			const n = 3000
			errs := onAll(comms, func(c *mp.Comm) error {
				r := c.Rank()
				// The references, blocking.
				wants := make([][]float64, len(icollCases))
				for k, tc := range icollCases {
					wants[k] = make([]float64, tc.out(n*p, p))
					if err := tc.blocking(c, icollInput(r, k, n*p), wants[k]); err != nil {
						return err
					}
				}
				check := func(gots [][]float64) error {
					for k, tc := range icollCases {
						if tc.name == "reduce" && r != 0 {
							continue
						}
						if !sameBits(gots[k], wants[k]) {
							return fmt.Errorf("rank %d: %s in flight with the others gave %v…, want %v…", r, tc.name, head(gots[k]), head(wants[k]))
						}
					}
					return nil
				}
				start := func(between func(k int) error) ([]*mp.Request, [][]float64, error) {
					reqs := make([]*mp.Request, len(icollCases))
					gots := make([][]float64, len(icollCases))
					for k, tc := range icollCases {
						gots[k] = make([]float64, tc.out(n*p, p))
						var err error
						if reqs[k], err = tc.start(c, icollInput(r, k, n*p), gots[k]); err != nil {
							return nil, nil, err
						}
						if err := between(k); err != nil {
							return nil, nil, err
						}
					}
					return reqs, gots, nil
				}

				// Reverse order, with a blocking Allreduce, an Ibarrier and a
				// ring of point-to-point messages in the middle.
				var bar *mp.Request
				reqs, gots, err := start(func(k int) error {
					switch k {
					case 2:
						x := []int64{int64(r)}
						if err := mp.Allreduce(c, x, x, mp.Sum); err != nil {
							return err
						}
						if want := int64(p * (p - 1) / 2); x[0] != want {
							return fmt.Errorf("blocking Allreduce among non-blocking ones: %d, want %d", x[0], want)
						}
					case 3:
						var err error
						bar, err = mp.Ibarrier(c)
						return err
					case 4:
						got := make([]int32, 1)
						rq := mp.Irecv(c, got, (r+p-1)%p, 7)
						if err := mp.Send(c, []int32{int32(r)}, (r+1)%p, 7); err != nil {
							return err
						}
						if _, err := rq.Wait(); err != nil {
							return err
						}
						if got[0] != int32((r+p-1)%p) {
							return fmt.Errorf("point-to-point among collectives: got %d", got[0])
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
				if _, err := bar.Wait(); err != nil {
					return err
				}
				for k := len(reqs) - 1; k >= 0; k-- {
					if _, err := reqs[k].Wait(); err != nil {
						return err
					}
				}
				if err := check(gots); err != nil {
					return err
				}

				// WaitAny: each once, then -1.
				nothing := func(int) error { return nil }
				if reqs, gots, err = start(nothing); err != nil {
					return err
				}
				seen := make([]bool, len(reqs))
				for range reqs {
					i, _, err := mp.WaitAny(reqs...)
					if err != nil {
						return err
					}
					if i < 0 || seen[i] {
						return fmt.Errorf("WaitAny gave %d twice or none", i)
					}
					seen[i] = true
				}
				if i, _, _ := mp.WaitAny(reqs...); i != -1 {
					return fmt.Errorf("WaitAny with none active gave %d", i)
				}
				if err := check(gots); err != nil {
					return err
				}

				// WaitSome (and TestAny) until none is left.
				if reqs, gots, err = start(nothing); err != nil {
					return err
				}
				left := len(reqs)
				for left > 0 {
					idx, err := mp.WaitSome(reqs...)
					if err != nil {
						return err
					}
					if len(idx) == 0 {
						return errors.New("WaitSome gave nothing with requests active")
					}
					left -= len(idx)
				}
				if i, done, _, _ := mp.TestAny(reqs...); i != -1 || !done {
					return fmt.Errorf("TestAny with none active: %d %v", i, done)
				}
				return check(gots)
			})
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestIcollOverlap: a non-blocking collective progresses with no call
// into mp: rank 1 joins late, and rank 0's request completes while rank 0
// only sleeps.
func TestIcollOverlap(t *testing.T) {
	comms := openRanks(t, 2, "tcp")
	errs := onAll(comms, func(c *mp.Comm) error {
		buf := icollInput(c.Rank(), 0, 1<<16)
		if c.Rank() == 1 {
			time.Sleep(20 * time.Millisecond)
			return mp.Allreduce(c, buf, buf, mp.Sum)
		}
		req, err := mp.Iallreduce(c, buf, buf, mp.Sum)
		if err != nil {
			return err
		}
		select {
		case <-req.Done():
		case <-time.After(30 * time.Second):
			return errors.New("the Iallreduce did not complete while the rank waited outside mp")
		}
		if done, _, err := req.Test(); !done || err != nil {
			return fmt.Errorf("Test after Done: %v %v", done, err)
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestIcollMisuse: argument errors at once with no request; Cancel is
// ErrNotSupported and the collective goes on; after Close, ErrClosed.
func TestIcollMisuse(t *testing.T) {
	comms := openRanks(t, 2, "tcp")
	if _, err := mp.Ibcast(comms[0], []float64{1}, 2); !errors.Is(err, mp.ErrInvalid) {
		t.Errorf("Ibcast with root 2 of 2: %v, want ErrInvalid", err)
	}
	if _, err := mp.Iallgather(comms[0], []float64{1}, make([]float64, 3)); !errors.Is(err, mp.ErrInvalid) {
		t.Errorf("Iallgather into a short buffer: %v, want ErrInvalid", err)
	}
	if _, err := mp.Ibarrier(nil); !errors.Is(err, mp.ErrInvalid) {
		t.Errorf("Ibarrier(nil): %v, want ErrInvalid", err)
	}
	errs := onAll(comms, func(c *mp.Comm) error {
		x := []int64{int64(c.Rank() + 1)}
		req, err := mp.Iallreduce(c, x, x, mp.Sum)
		if err != nil {
			return err
		}
		if err := req.Cancel(); !errors.Is(err, mp.ErrNotSupported) {
			return fmt.Errorf("Cancel of an Iallreduce: %v, want ErrNotSupported", err)
		}
		if _, err := req.Wait(); err != nil {
			return err
		}
		if x[0] != 3 {
			return fmt.Errorf("after Cancel the Iallreduce gave %d, want 3", x[0])
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	onAll(comms, func(c *mp.Comm) error { return c.Close() })
	if _, err := mp.Ibarrier(comms[0]); !errors.Is(err, mp.ErrClosed) {
		t.Errorf("Ibarrier after Close: %v, want ErrClosed", err)
	}
}

// TestIcollPeerLeaves: a peer that closes before joining ends the
// collectives in flight with ErrPeerLost, the one running and those queued
// behind it; closing the rank itself ends its own with ErrClosed.
func TestIcollPeerLeaves(t *testing.T) {
	comms := openRanks(t, 2, "tcp")
	buf := make([]float64, 1<<16)
	r1, err := mp.Iallreduce(comms[0], buf, buf, mp.Sum)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := mp.Ibcast(comms[0], make([]byte, 10), 1)
	if err != nil {
		t.Fatal(err)
	}
	// A rank's Close waits (up to the linger) for its peers' goodbyes: each
	// closing rank here is let go by its peer's Close once its requests
	// have ended.
	closed := make(chan error, 1)
	go func() { closed <- comms[1].Close() }()
	for i, q := range []*mp.Request{r1, r2} {
		if _, err := q.Wait(); !errors.Is(err, mp.ErrPeerLost) {
			t.Errorf("request %d after the peer left: %v, want ErrPeerLost", i, err)
		}
	}
	comms[0].Close()
	<-closed

	comms = openRanks(t, 2, "tcp")
	r3, err := mp.Iallreduce(comms[0], buf, buf, mp.Sum)
	if err != nil {
		t.Fatal(err)
	}
	r4, err := mp.Ibarrier(comms[0])
	if err != nil {
		t.Fatal(err)
	}
	go func() { closed <- comms[0].Close() }() // joins the worker: no goroutine left
	for i, q := range []*mp.Request{r3, r4} {
		if _, err := q.Wait(); !errors.Is(err, mp.ErrClosed) {
			t.Errorf("request %d after Close: %v, want ErrClosed", i, err)
		}
	}
	comms[1].Close()
	<-closed
}
