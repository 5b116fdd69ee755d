package waitgraph

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzWaitGraph draws the wait-for graph of arbitrary "waits" answers
// (one per rank, split at form feeds) of a job of up to 9 ranks: it
// never panics, has lines only when some rank waits for another rank of
// the job, and its edges are ranks of the job.
func FuzzWaitGraph(f *testing.F) {
	f.Add("1\tsend\t5\tSend to 1 tag 5\n\f0\tsend\t5\tSend to 0 tag 5\n", uint8(2))
	f.Add("1\trecv\t0\tRecv\n\f2\tallreduce\t-1\tAllreduce\n\f0\tbarrier\t-1\tBarrier (called at /x/y.go:9 in main.f)\n", uint8(3))
	f.Add("-1\trecv\t0\tany\n\f\f7\trecv\t1\tx\n", uint8(3))
	f.Add("9999999999999999999999\trecv\t0\tx\n", uint8(1))
	f.Fuzz(func(t *testing.T, data string, size uint8) {
		n := int(size%9) + 1
		waits := map[int][]Wait{}
		edge := false
		for r, s := range strings.Split(data, "\f") {
			waits[r] = Parse(s)
			for _, w := range waits[r] {
				if strings.ContainsAny(w.op, "\t\n") {
					t.Fatalf("a wait's operation %q holds a separator", w.op)
				}
				edge = edge || (r < n && w.peer >= 0 && w.peer < n && w.peer != r)
			}
		}
		lines := Describe(n, waits)
		if (len(lines) > 0) != edge {
			t.Fatalf("%d lines of graph for a job with edges %v: %q", len(lines), edge, lines)
		}
		if len(lines) > 1+n+n*n {
			t.Fatalf("%d lines for %d ranks", len(lines), n)
		}
		if len(lines) == 0 {
			return
		}
		head, ok := strings.CutPrefix(lines[0], "wait-for graph: ")
		if !ok {
			t.Fatalf("the graph's first line is %q", lines[0])
		}
		for _, e := range strings.Split(head, ", ") {
			var from, to int
			if _, err := fmt.Sscanf(e, "%d→%d", &from, &to); err != nil || from < 0 || from >= n || to < 0 || to >= n || from == to {
				t.Fatalf("edge %q in a job of %d ranks", e, n)
			}
		}
	})
}
