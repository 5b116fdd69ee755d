package waitgraph

import (
	"strings"
	"testing"
)

// The wait-for graph's words for the classic hangs, from the ranks'
// "waits" lines as mp writes them.
func TestWaitGraph(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int
		waits map[int]string
		want  []string
		none  bool
	}{{
		name: "head-to-head sends",
		n:    2,
		waits: map[int]string{
			0: "1\tsend\t5\tsend to rank 1, tag 5, 131072 × float64 (called at /src/halo.go:40 in main.step)\n",
			1: "0\tsend\t5\tsend to rank 0, tag 5, 131072 × float64 (called at /src/halo.go:40 in main.step)\n",
		},
		want: []string{
			"wait-for graph: 0→1, 1→0",
			"rank 0 (send to rank 1, tag 5, 131072 × float64 at halo.go:40) waits for rank 1, " +
				"which (send to rank 0, tag 5, 131072 × float64 at halo.go:40) waits for rank 0: " +
				"head-to-head blocking sends: use Sendrecv, or Isend before the receive",
		},
	}, {
		name: "a receive whose sender finished",
		n:    2,
		waits: map[int]string{
			0: "1\trecv\t3\trecv from rank 1, tag 3, 2 × int32 (called at /src/a.go:9 in main.main)\n",
			1: "",
		},
		want: []string{
			"wait-for graph: 0→1",
			"rank 0 (recv from rank 1, tag 3, 2 × int32 at a.go:9) waits for rank 1, which waits for nothing: " +
				"it has not made the matching call (it has finished, or is busy elsewhere)",
		},
	}, {
		name: "a rank that did not answer",
		n:    2,
		waits: map[int]string{
			0: "1\trecv\t3\trecv from rank 1, tag 3, 2 × int32\n",
		},
		want: []string{"rank 0 (recv from rank 1, tag 3, 2 × int32) waits for rank 1, which did not answer"},
	}, {
		name: "a ring of three receives",
		n:    3,
		waits: map[int]string{
			0: "1\trecv\t0\trecv from rank 1\n",
			1: "2\trecv\t0\trecv from rank 2\n",
			2: "0\trecv\t0\trecv from rank 0\n",
		},
		want: []string{
			"wait-for graph: 0→1, 1→2, 2→0",
			"rank 0 (recv from rank 1) waits for rank 1, which (recv from rank 2) waits for rank 2, " +
				"which (recv from rank 0) waits for rank 0: each receives before it sends",
		},
	}, {
		name: "ranks in collectives",
		n:    2,
		waits: map[int]string{
			0: "1\tbarrier (shared memory)\t0\tBarrier (shared memory) waiting for rank 1\n",
			1: "0\tallreduce (shared memory)\t0\tAllreduce (shared memory) waiting for rank 0\n",
		},
		want: []string{"every rank must call the same collectives in the same order"},
	}, {
		name:  "wildcards and garbage draw no edge",
		n:     2,
		waits: map[int]string{0: "-1\trecv\t-1\trecv from any rank\nnot a line\n", 1: ""},
		none:  true,
	}} {
		t.Run(c.name, func(t *testing.T) {
			waits := map[int][]Wait{}
			for r, s := range c.waits {
				waits[r] = Parse(s)
			}
			got := strings.Join(Describe(c.n, waits), "\n")
			if c.none && got != "" {
				t.Errorf("got %q, want nothing", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("lacks %q:\n%s", w, got)
				}
			}
		})
	}
}
