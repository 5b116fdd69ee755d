package trace

import (
	"cmp"
	"slices"
)

// Lanes places the spans of one track in lanes so that, within a lane,
// any two spans either nest or do not overlap (a span that ends when
// another begins does not overlap it), as the trace-event format wants of
// one thread. bounds gives a span's start and end (end ≥ start). It
// returns each span's lane, in the order of spans, and the number of
// lanes. Spans go to the lowest lane they fit, taken in order of start
// (the longer first where two start together), so spans that already
// nest (the blocking calls of one goroutine, a program's spans around
// them) share lane 0.
func Lanes[S any](spans []S, bounds func(S) (start, end int64)) (lane []int, n int) {
	type iv struct {
		start, end int64
		i          int
	}
	order := make([]iv, len(spans))
	for i, s := range spans {
		a, b := bounds(s)
		order[i] = iv{a, max(a, b), i}
	}
	slices.SortStableFunc(order, func(x, y iv) int {
		if c := cmp.Compare(x.start, y.start); c != 0 {
			return c
		}
		return cmp.Compare(y.end, x.end)
	})
	lane = make([]int, len(spans))
	var open [][]int64 // per lane, the ends of the spans open there, innermost last
	for _, v := range order {
		placed := false
		for l := range open {
			st := open[l]
			for len(st) > 0 && st[len(st)-1] <= v.start {
				st = st[:len(st)-1]
			}
			open[l] = st
			if len(st) == 0 || st[len(st)-1] >= v.end {
				open[l] = append(st, v.end)
				lane[v.i] = l
				placed = true
				break
			}
		}
		if !placed {
			open = append(open, []int64{v.end})
			lane[v.i] = len(open) - 1
		}
	}
	return lane, len(open)
}
