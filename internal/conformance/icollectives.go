package conformance

import (
	"math"
	"math/rand/v2"

	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// icollectiveCases: the non-blocking collectives against their blocking
// forms on random data (the same bits: they run the same path), several
// in flight at once waited in reverse order among blocking collectives and
// point-to-point messages, and WaitAny and WaitSome over them.
func icollectiveCases() []Case {
	return []Case{
		{Name: "Icoll/MatchesBlocking", MinRanks: 1, Run: icollMatches},
		{Name: "Icoll/InFlightReverse", MinRanks: 1, Run: icollInFlight},
		{Name: "Icoll/WaitAnySome", MinRanks: 1, Run: icollWaitAnySome},
	}
}

// icollKind is one collective, blocking and not, on float64s of n
// elements per block.
type icollKind struct {
	name     string
	outLen   func(n, p int) int
	blocking func(c *mp.Comm, in, out []float64) error
	start    func(c *mp.Comm, in, out []float64) (*mp.Request, error)
}

// icollRoot is the root of the rooted kinds: the last rank.
func icollRoot(c *mp.Comm) int { return c.Size() - 1 }

// atRoot is out at the root and nil elsewhere (Reduce's receive buffer).
func atRoot(c *mp.Comm, out []float64) []float64 {
	if c.Rank() == icollRoot(c) {
		return out
	}
	return nil
}

var icollKinds = []icollKind{
	{"Bcast", func(n, p int) int { return n * p },
		func(c *mp.Comm, in, out []float64) error { copy(out, in); return mp.Bcast(c, out, icollRoot(c)) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) {
			copy(out, in)
			return mp.Ibcast(c, out, icollRoot(c))
		}},
	{"Reduce", func(n, p int) int { return n * p },
		func(c *mp.Comm, in, out []float64) error {
			return mp.Reduce(c, in, atRoot(c, out), mp.Sum, icollRoot(c))
		},
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) {
			return mp.Ireduce(c, in, atRoot(c, out), mp.Sum, icollRoot(c))
		}},
	{"Allreduce", func(n, p int) int { return n * p },
		func(c *mp.Comm, in, out []float64) error { return mp.Allreduce(c, in, out, mp.Sum) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) { return mp.Iallreduce(c, in, out, mp.Sum) }},
	{"Allgather", func(n, p int) int { return n * p * p },
		func(c *mp.Comm, in, out []float64) error { return mp.Allgather(c, in, out) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) { return mp.Iallgather(c, in, out) }},
	{"ReduceScatter", func(n, p int) int { return n },
		func(c *mp.Comm, in, out []float64) error { return mp.ReduceScatter(c, in, out, mp.Max) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) {
			return mp.IreduceScatter(c, in, out, mp.Max)
		}},
	{"Alltoall", func(n, p int) int { return n * p },
		func(c *mp.Comm, in, out []float64) error { return mp.Alltoall(c, in, out) },
		func(c *mp.Comm, in, out []float64) (*mp.Request, error) { return mp.Ialltoall(c, in, out) }},
}

// icollData is rank r's random input of m float64s for seed k.
func icollData(r, k, m int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(r)+1, uint64(k)))
	v := make([]float64, m)
	for i := range v {
		v[i] = (rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(8)-4))
	}
	return v
}

// requireSameBits fails unless got and want hold the same float64s.
func requireSameBits(t T, want, got []float64, msg string, args ...any) {
	require.Equal(t, len(want), len(got), append([]any{msg}, args...)...)
	for i := range want {
		if math.Float64bits(want[i]) != math.Float64bits(got[i]) {
			require.Failf(t, "different bits", "element %d: %v, want %v; "+msg, append([]any{i, got[i], want[i]}, args...)...)
		}
	}
}

// skipsResult reports whether rank r has no result of kind k (a Reduce
// off the root).
func skipsResult(c *mp.Comm, k icollKind) bool { return k.name == "Reduce" && c.Rank() != icollRoot(c) }

func icollMatches(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for _, n := range []int{0, 1, 1001, 70000} {
		for ki, k := range icollKinds {
			in := icollData(r, ki*7+n, n*p)
			want, got := make([]float64, k.outLen(n, p)), make([]float64, k.outLen(n, p))
			require.NoError(t, k.blocking(c, in, want), "%s of %d", k.name, n)
			req, err := k.start(c, in, got)
			require.NoError(t, err, "I%s of %d", k.name, n)
			st, err := req.Wait()
			require.NoError(t, err, "I%s of %d", k.name, n)
			require.Equal(t, mp.Status{}, st, "I%s: the status of a collective is zero", k.name)
			if !skipsResult(c, k) {
				requireSameBits(t, want, got, "I%s of %d against %s", k.name, n, k.name)
			}
		}
	}
	req, err := mp.Ibarrier(c)
	require.NoError(t, err)
	_, err = req.Wait()
	require.NoError(t, err, "Ibarrier")
}

// icollStartAll starts every kind on inputs of n per block; between is
// called after each start.
func icollStartAll(t T, c *mp.Comm, n int, between func(i int)) ([]*mp.Request, [][]float64, [][]float64) {
	p, r := c.Size(), c.Rank()
	reqs := make([]*mp.Request, len(icollKinds))
	gots, wants := make([][]float64, len(icollKinds)), make([][]float64, len(icollKinds))
	for ki, k := range icollKinds {
		in := icollData(r, 100+ki, n*p)
		wants[ki] = make([]float64, k.outLen(n, p))
		require.NoError(t, k.blocking(c, in, wants[ki]), k.name)
	}
	for ki, k := range icollKinds {
		gots[ki] = make([]float64, k.outLen(n, p))
		var err error
		reqs[ki], err = k.start(c, icollData(r, 100+ki, n*p), gots[ki])
		require.NoError(t, err, "I%s", k.name)
		between(ki)
	}
	return reqs, gots, wants
}

func icollCheck(t T, c *mp.Comm, gots, wants [][]float64) {
	for ki, k := range icollKinds {
		if !skipsResult(c, k) {
			requireSameBits(t, wants[ki], gots[ki], "I%s in flight with the others", k.name)
		}
	}
}

func icollInFlight(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	var bar *mp.Request
	reqs, gots, wants := icollStartAll(t, c, 300, func(i int) {
		switch i {
		case 1:
			x := []int64{int64(r)}
			require.NoError(t, mp.Allreduce(c, x, x, mp.Sum), "a blocking Allreduce among non-blocking ones")
			require.Equal(t, int64(p*(p-1)/2), x[0])
		case 2:
			var err error
			bar, err = mp.Ibarrier(c)
			require.NoError(t, err)
		case 3:
			got := []int32{-1}
			rq := mp.Irecv(c, got, (r+p-1)%p, 5)
			require.NoError(t, mp.Send(c, []int32{int32(r)}, (r+1)%p, 5))
			_, err := rq.Wait()
			require.NoError(t, err)
			require.Equal(t, int32((r+p-1)%p), got[0], "a message among collectives")
		}
	})
	for i := len(reqs) - 1; i >= 0; i-- {
		_, err := reqs[i].Wait()
		require.NoError(t, err, "I%s, waited in reverse order", icollKinds[i].name)
	}
	_, err := bar.Wait()
	require.NoError(t, err, "Ibarrier")
	icollCheck(t, c, gots, wants)
}

func icollWaitAnySome(t T, c *mp.Comm) {
	reqs, gots, wants := icollStartAll(t, c, 50, func(int) {})
	seen := map[int]bool{}
	for range reqs {
		i, _, err := mp.WaitAny(reqs...)
		require.NoError(t, err)
		require.False(t, seen[i], "WaitAny gave request %d twice", i)
		require.GreaterOrEqual(t, i, 0)
		seen[i] = true
	}
	i, _, _ := mp.WaitAny(reqs...)
	require.Equal(t, -1, i, "WaitAny with none active")
	icollCheck(t, c, gots, wants)

	reqs, gots, wants = icollStartAll(t, c, 50, func(int) {})
	for left := len(reqs); left > 0; {
		idx, err := mp.WaitSome(reqs...)
		require.NoError(t, err)
		require.NotEmpty(t, idx, "WaitSome with requests active")
		left -= len(idx)
	}
	icollCheck(t, c, gots, wants)
}
