// Package waitgraph draws a job's wait-for graph from its ranks' pending
// operations, and says each cycle in words with the mistake it probably
// is ("head-to-head blocking sends: use Sendrecv, …"). Package mp writes
// each rank's operations as "waits" lines; courier run (internal/launch)
// and mp's own timeout report, which asks the other ranks over the job's
// connections, read them with Parse and describe them with Describe.
package waitgraph

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Wait is one pending operation of a rank, as the rank reported it: the
// rank it waits for (-1: any), the operation ("send", "recv", or a
// collective's), its tag, and its description in the program's words.
type Wait struct {
	peer int
	op   string
	tag  int
	desc string
}

// Parse reads a rank's "waits" lines, one per pending operation,
// "peer<TAB>op<TAB>tag<TAB>description"; malformed lines are skipped.
func Parse(s string) []Wait {
	var out []Wait
	for line := range strings.Lines(s) {
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), "\t", 4)
		if len(f) != 4 {
			continue
		}
		peer, err1 := strconv.Atoi(f[0])
		tag, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, Wait{peer: peer, op: f[1], tag: tag, desc: shortDesc(f[3])})
	}
	return out
}

// shortDesc shortens a description's " (called at /dir/file.go:12 in
// pkg.f)" to " at file.go:12", for the graph's sentences (the full one is
// in the rank's report above them).
func shortDesc(d string) string {
	i := strings.Index(d, " (called at ")
	if i < 0 {
		return d
	}
	rest := d[i+len(" (called at "):]
	end := strings.Index(rest, " in ")
	paren := strings.Index(rest, ")")
	if end < 0 || paren < end {
		return d
	}
	return d[:i] + " at " + filepath.Base(rest[:end]) + rest[paren+1:]
}

// Describe describes the job's wait-for graph from the ranks' answers
// (waits, by rank, of n): its edges, each cycle in words with what it
// probably is, and each rank waited for that waits for nothing.
func Describe(n int, waits map[int][]Wait) []string {
	if len(waits) == 0 {
		return nil
	}
	next := make([][]int, n) // the ranks each rank waits for
	first := make([]map[int]Wait, n)
	var edges []string
	for r := range n {
		first[r] = map[int]Wait{}
		for _, w := range waits[r] {
			if w.peer < 0 || w.peer >= n || w.peer == r {
				continue
			}
			if _, ok := first[r][w.peer]; !ok {
				first[r][w.peer] = w
				next[r] = append(next[r], w.peer)
				edges = append(edges, fmt.Sprintf("%d→%d", r, w.peer))
			}
		}
	}
	if len(edges) == 0 {
		return nil
	}
	out := []string{"wait-for graph: " + strings.Join(edges, ", ")}
	inCycle := make([]bool, n)
	for s := range n {
		cyc := cycleFrom(s, next)
		if cyc == nil {
			continue
		}
		for _, r := range cyc {
			inCycle[r] = true
		}
		out = append(out, describeCycle(cyc, first))
	}
	for r := range n {
		for _, p := range next[r] {
			if len(waits[p]) > 0 || inCycle[r] {
				continue
			}
			what := "which did not answer (it has exited, or does not use courier)"
			if _, answered := waits[p]; answered {
				what = "which waits for nothing: it has not made the matching call (it has finished, or is busy elsewhere)"
			}
			out = append(out, fmt.Sprintf("rank %d (%s) waits for rank %d, %s", r, first[r][p].desc, p, what))
		}
	}
	return out
}

// cycleFrom returns a cycle of the graph next through s whose other ranks
// are all above s (so each cycle is found once, from its lowest rank), or
// nil.
func cycleFrom(s int, next [][]int) []int {
	seen := map[int]bool{}
	var path []int
	var walk func(r int) bool
	walk = func(r int) bool {
		path = append(path, r)
		seen[r] = true
		for _, p := range next[r] {
			if p == s {
				return true
			}
			if p > s && !seen[p] && walk(p) {
				return true
			}
		}
		path = path[:len(path)-1]
		return false
	}
	if walk(s) {
		return path
	}
	return nil
}

// describeCycle says a cycle in words: who waits in what for whom, and,
// where the operations say it, what kind of mistake it is.
func describeCycle(cyc []int, first []map[int]Wait) string {
	var b strings.Builder
	ops := make([]string, len(cyc))
	for i, r := range cyc {
		p := cyc[(i+1)%len(cyc)]
		w := first[r][p]
		ops[i] = w.op
		if i == 0 {
			fmt.Fprintf(&b, "rank %d (%s) waits for rank %d", r, w.desc, p)
		} else {
			fmt.Fprintf(&b, ", which (%s) waits for rank %d", w.desc, p)
		}
	}
	kind := "a cycle of waits"
	switch {
	case allAre(ops, "send"):
		kind = "head-to-head blocking sends: use Sendrecv, or Isend before the receive"
	case allAre(ops, "recv"):
		kind = "each receives before it sends: one must send first, or use Sendrecv"
	case !slices.Contains(ops, "send") && !slices.Contains(ops, "recv"):
		kind = "the ranks wait in collectives: every rank must call the same collectives in the same order"
	}
	fmt.Fprintf(&b, ": %s", kind)
	return b.String()
}

func allAre(ops []string, op string) bool {
	for _, o := range ops {
		if o != op {
			return false
		}
	}
	return len(ops) > 0
}
