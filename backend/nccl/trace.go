package nccl

import (
	"fmt"
	"os"
	"time"
)

// traceStats sums where the time of each group goes, for the groups of
// sends and those of receives apart: the launch call, and NCCL's share of
// it (ncclGroupStart to ncclGroupEnd; the rest is staging, the context's
// push and pop, and cgo), from its return until NCCL has the group on the
// stream (ncclInProgress, then settled), and from there until its event
// fires and progress sees it (and how many queries that took); and the
// time from one group's completion to the next launch on the rank (the
// program and courier between two operations). Set COURIER_NCCL_TRACE=1
// to have Close print them.
type traceStats struct {
	dir     [2]traceDir // sends, receives
	gaps    int64
	gap     time.Duration
	lastEnd time.Time
	// The gap in three: from the completion to Wait's return, from there
	// to the next Isend or Irecv, and from there to the launch.
	lastRet, lastPost time.Time
	toRet, toPost     time.Duration
	toLaunch          time.Duration
	split             int64
}

// returned notes that a wait returned now; posted, that an operation was
// posted now.
func (t *traceStats) returned(now time.Time) {
	if t.lastRet.IsZero() {
		t.lastRet = now
	}
}

func (t *traceStats) posted(now time.Time) {
	if t.lastPost.IsZero() {
		t.lastPost = now
	}
}

type traceDir struct {
	n                              int64
	launch, nccl, settle, complete time.Duration
	polls                          int64
}

// launched notes that a group is being launched now.
func (t *traceStats) launched(now time.Time) {
	if !t.lastEnd.IsZero() {
		t.gaps++
		t.gap += now.Sub(t.lastEnd)
		if r, p := t.lastRet, t.lastPost; !r.Before(t.lastEnd) && !p.Before(r) && !now.Before(p) {
			t.split++
			t.toRet += r.Sub(t.lastEnd)
			t.toPost += p.Sub(r)
			t.toLaunch += now.Sub(p)
		}
		t.lastEnd = time.Time{}
	}
	t.lastRet, t.lastPost = time.Time{}, time.Time{}
}

func (t *traceStats) add(g *group, done time.Time) {
	t.lastEnd = done
	t.lastRet, t.lastPost = time.Time{}, time.Time{}
	if g.t0.IsZero() || g.t2.IsZero() {
		return
	}
	d := &t.dir[g.ch%2]
	d.n++
	d.launch += g.t1.Sub(g.t0)
	d.nccl += g.nccl
	d.settle += g.t2.Sub(g.t1)
	d.complete += done.Sub(g.t2)
	d.polls += g.polls
}

func (t *traceStats) report(rank int) {
	for i, d := range t.dir {
		if d.n == 0 {
			continue
		}
		n := time.Duration(d.n)
		fmt.Fprintf(os.Stderr, "courier nccl trace: rank %d: %d groups of %s; mean launch %v (NCCL's calls %v), until on the stream %v, until seen done %v (%.1f queries)\n",
			rank, d.n, [2]string{"sends", "receives"}[i], d.launch/n, d.nccl/n, d.settle/n, d.complete/n, float64(d.polls)/float64(d.n))
	}
	if t.gaps > 0 {
		fmt.Fprintf(os.Stderr, "courier nccl trace: rank %d: mean time from a group's completion to the next launch: %v (%d times)\n",
			rank, t.gap/time.Duration(t.gaps), t.gaps)
	}
	if t.split > 0 {
		n := time.Duration(t.split)
		fmt.Fprintf(os.Stderr, "courier nccl trace: rank %d: of which until Wait returned %v, then until the next post %v, then until its launch %v (%d times)\n",
			rank, t.toRet/n, t.toPost/n, t.toLaunch/n, t.split)
	}
}

// openTrace prints how long Open has taken at each of its phases, when
// COURIER_NCCL_TRACE is set (on).
type openTrace struct {
	on    bool
	rank  int
	start time.Time
}

// newOpenTrace starts Open's trace, as getenv sees COURIER_NCCL_TRACE.
func newOpenTrace(getenv func(string) string, rank int) openTrace {
	return openTrace{on: getenv("COURIER_NCCL_TRACE") != "", rank: rank, start: time.Now()}
}

// phase prints that Open has reached what, and when.
func (t openTrace) phase(what string) {
	if t.on {
		fmt.Fprintf(os.Stderr, "courier nccl trace: rank %d: Open: %s after %v\n", t.rank, what, time.Since(t.start))
	}
}
