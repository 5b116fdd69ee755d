package bench

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/leakcheck"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Check(m.Run()))
}

// slowAfter returns a round trip that takes no time for its first fast
// calls and sleep for each one after, and the count of its calls.
func slowAfter(fast int, sleep time.Duration) (func() error, *int) {
	calls := new(int)
	return func() error {
		if *calls++; *calls > fast {
			time.Sleep(sleep)
		}
		return nil
	}, calls
}

// TestPingPongBounded: a machine that slows down after the warm-up (here a
// round trip of no time that becomes one of 2 ms) stretches the timed
// part of a latency measurement by a chunk at most, not to the iteration
// count the warm-up suggested (2000 round trips, 4 s here); both ranks
// make the same calls, and the figure is the slow one's.
func TestPingPongBounded(t *testing.T) {
	const (
		iters  = 2000
		budget = 50 * time.Millisecond
		sleep  = 2 * time.Millisecond
	)
	warm := min(iters/10+1, 100)
	ranktest.Run(t, 2, func(rt *ranktest.T, c *mp.Comm) {
		rt2, calls := slowAfter(warm, sleep)
		start := time.Now()
		d, _, err := pingPong(c, rt2, iters, budget)
		took := time.Since(start)
		if err != nil {
			rt.Errorf("pingPong: %v", err)
			return
		}
		timed := *calls - warm
		rt.Logf("rank %d: %d round trips timed in %v, %v one way", c.Rank(), timed, took, d)
		if took > 10*budget {
			rt.Errorf("rank %d: pingPong took %v with a budget of %v (%d round trips timed)", c.Rank(), took, budget, timed)
		}
		if timed < 10 || timed >= iters {
			rt.Errorf("rank %d: %d round trips timed, want at least 10 and fewer than %d", c.Rank(), timed, iters)
		}
		// At least half the slow round trip; at most half the wall time
		// per timed round trip (the warm-up's included): a loaded machine
		// stretches the sleeps, not the arithmetic.
		if most := took / time.Duration(2*max(timed, 1)); d < sleep/2 || d > most {
			rt.Errorf("rank %d: %v one way, want at least %v (half the slow round trip) and at most %v (half the wall time per timed round trip)", c.Rank(), d, sleep/2, most)
		}
		counts := []int64{int64(*calls)}
		if err := mp.Allreduce(c, counts, counts, mp.Max); err != nil {
			rt.Errorf("Allreduce: %v", err)
		} else if counts[0] != int64(*calls) {
			rt.Errorf("rank %d: %d round trips, the other rank %d", c.Rank(), *calls, counts[0])
		}
	})
}

// TestPingPongCounts: pingPong times every round trip it was asked for
// when they fit the budget, and at least 10 when one alone exceeds it.
func TestPingPongCounts(t *testing.T) {
	for _, tc := range []struct {
		iters  int
		sleep  time.Duration
		budget time.Duration
		want   int
	}{
		{iters: 30, sleep: 100 * time.Microsecond, budget: time.Second, want: 30},
		{iters: 1000, sleep: 10 * time.Millisecond, budget: 5 * time.Millisecond, want: 10},
	} {
		warm := min(tc.iters/10+1, 100)
		ranktest.Run(t, 2, func(rt *ranktest.T, c *mp.Comm) {
			rt2, calls := slowAfter(0, tc.sleep)
			if _, _, err := pingPong(c, rt2, tc.iters, tc.budget); err != nil {
				rt.Errorf("pingPong: %v", err)
				return
			}
			if got := *calls - warm; got != tc.want {
				rt.Errorf("rank %d: %d iterations of %v in a budget of %v: %d timed, want %d", c.Rank(), tc.iters, tc.sleep, tc.budget, got, tc.want)
			}
		})
	}
}

// TestRunRefusesNegativeLatencyTime: a negative Config.LatencyTime is an
// error from Run on every rank, before anything is measured.
func TestRunRefusesNegativeLatencyTime(t *testing.T) {
	ranktest.Run(t, 2, func(rt *ranktest.T, c *mp.Comm) {
		cfg := Config{LatencySizes: []int{8}, Reps: 1, Budget: 1 << 10, LatencyTime: -time.Second}
		if _, err := Run(c, cfg, nil); err == nil || !strings.Contains(err.Error(), "latency time -1s") {
			rt.Errorf("rank %d: Run with a latency time of -1s: %v, want an error naming it", c.Rank(), err)
		}
	})
}
