package mp_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

// errStop ends a hang the report test made on purpose.
var errStop = errors.New("the report was read")

// Each classic hang, made on purpose on two ranks over TCP (so that the
// collectives run over point-to-point messages): every rank's
// PendingReport must say, in the program's words, what it waits for.
func TestPendingReportWords(t *testing.T) {
	big := make([]float64, 1<<17) // 1 MiB: a send that waits for its receive
	for _, c := range []struct {
		name string
		rank [2]func(c *mp.Comm) error
		want [2][]string
		not  []string
	}{{
		name: "head-to-head sends",
		rank: [2]func(c *mp.Comm) error{
			func(c *mp.Comm) error { return mp.Send(c, big, 1, 5) },
			func(c *mp.Comm) error { return mp.Send(c, big, 0, 5) },
		},
		want: [2][]string{
			{"send to rank 1, tag 5, 131072 × float64 (called at ", "report_test.go:",
				"arrived from rank 1, tag 5, 131072 × float64: no receive matches it yet"},
			{"send to rank 0, tag 5, 131072 × float64 (called at "},
		},
	}, {
		name: "a receive whose sender does not send",
		rank: [2]func(c *mp.Comm) error{
			func(c *mp.Comm) error { _, err := mp.Recv(c, make([]int32, 2), 1, 3); return err },
			func(c *mp.Comm) error { return nil },
		},
		want: [2][]string{{"recv from rank 1, tag 3, 2 × int32 (called at "}, nil},
	}, {
		name: "a tag mismatch",
		rank: [2]func(c *mp.Comm) error{
			func(c *mp.Comm) error { return mp.Send(c, []float32{1, 2, 3, 4}, 1, 8) },
			func(c *mp.Comm) error { _, err := mp.Recv(c, make([]float32, 4), 0, 9); return err },
		},
		want: [2][]string{nil, {
			"recv from rank 0, tag 9, 4 × float32 (called at ",
			"arrived from rank 0, tag 8, 4 × float32: no receive matches it yet",
		}},
	}, {
		name: "one rank in a collective, the other in a receive",
		rank: [2]func(c *mp.Comm) error{
			func(c *mp.Comm) error { return mp.Barrier(c) },
			func(c *mp.Comm) error { _, err := mp.Recv(c, make([]byte, 1), 0, 1); return err },
		},
		want: [2][]string{
			{"Barrier (called at ", ") waiting for rank 1: a receive from it"},
			{"recv from rank 0, tag 1, 1 × uint8 (called at ", "arrived from rank 0, of a collective: this rank has not called it yet"},
		},
		not: []string{"tag -2", "tag -3"},
	}, {
		name: "a wildcard receive",
		rank: [2]func(c *mp.Comm) error{
			func(c *mp.Comm) error { _, err := mp.Recv(c, make([]int64, 1), mp.AnySource, mp.AnyTag); return err },
			func(c *mp.Comm) error { return nil },
		},
		want: [2][]string{{"recv from any rank, tag any, 1 × int64 (called at "}, nil},
	}, {
		name: "a non-blocking collective",
		rank: [2]func(c *mp.Comm) error{
			func(c *mp.Comm) error {
				q, err := mp.Iallreduce(c, []float64{1}, make([]float64, 1), mp.Sum)
				if err != nil {
					return err
				}
				_, err = q.Wait()
				return err
			},
			func(c *mp.Comm) error { return nil },
		},
		want: [2][]string{{"Iallreduce (called at ", "waiting for rank 1: a"}, nil},
		not:  []string{"tag -2"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			var checked sync.WaitGroup
			checked.Add(2)
			reports := make([]string, 2)
			mptest.Run(t, 2, func(t *testing.T, comm *mp.Comm) {
				r := comm.Rank()
				done := make(chan error, 1)
				go func() { done <- c.rank[r](comm) }()
				deadline := time.Now().Add(10 * time.Second)
				for {
					rep := comm.PendingReport()
					all := true
					for _, w := range c.want[r] {
						all = all && strings.Contains(rep, w)
					}
					if all || time.Now().After(deadline) {
						reports[r] = rep
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				checked.Done()
				checked.Wait() // both ranks have read their reports
				comm.Abort(errStop)
				<-done
			}, mptest.WithBackend("tcp"))
			t.Logf("rank 0:\n%s\nrank 1:\n%s", reports[0], reports[1])
			for r := range 2 {
				for _, w := range c.want[r] {
					if !strings.Contains(reports[r], w) {
						t.Errorf("rank %d's report lacks %q:\n%s", r, w, reports[r])
					}
				}
				for _, w := range c.not {
					if strings.Contains(reports[r], w) {
						t.Errorf("rank %d's report has %q:\n%s", r, w, reports[r])
					}
				}
				if lines := strings.Split(reports[r], "\n"); len(lines) != len(uniq(lines)) {
					t.Errorf("rank %d's report lists a line twice:\n%s", r, reports[r])
				}
			}
		})
	}
}

// uniq is lines without repeats.
func uniq(lines []string) map[string]bool {
	m := map[string]bool{}
	for _, l := range lines {
		m[l] = true
	}
	return m
}

// Ranks that call different collectives, or one collective with
// different counts, are not a hang but an error, in the words of the
// collectives the program called, over TCP (the collectives' messages)
// and over shared memory (their areas): never the library's tag, nor its
// buffers' types.
func TestCollectiveDisagreementWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		rank [2]func(c *mp.Comm) error
		want map[string][]string // by backend: in some rank's error
	}{{
		name: "different collectives",
		rank: [2]func(c *mp.Comm) error{
			func(c *mp.Comm) error { return mp.Barrier(c) },
			func(c *mp.Comm) error { return mp.Allreduce(c, []float64{1}, make([]float64, 1), mp.Sum) },
		},
		want: map[string][]string{
			"tcp": {"part of this Barrier does not fit this rank's: it called another collective", "part of this Allreduce does not fit"},
			"shm": {"called allreduce of 8 bytes of float64 with sum where this rank called barrier (every rank must call the same collectives, alike)"},
		},
	}, {
		name: "different counts",
		rank: [2]func(c *mp.Comm) error{
			func(c *mp.Comm) error { return mp.Allreduce(c, make([]float32, 4), make([]float32, 4), mp.Sum) },
			func(c *mp.Comm) error { return mp.Allreduce(c, make([]float32, 8), make([]float32, 8), mp.Sum) },
		},
		want: map[string][]string{
			"tcp": {"Allreduce does not fit this rank's"},
			"shm": {"called allreduce of 32 bytes of float32 with sum where this rank called allreduce of 16 bytes of float32 with sum"},
		},
	}} {
		for _, backend := range []string{"tcp", "shm"} {
			t.Run(c.name+"/"+backend, func(t *testing.T) {
				t.Parallel()
				errs := make([]error, 2)
				mptest.Run(t, 2, func(t *testing.T, comm *mp.Comm) {
					errs[comm.Rank()] = c.rank[comm.Rank()](comm)
				}, mptest.WithBackend(backend), mptest.WithInitOptions(mp.WithTimeout(10*time.Second)))
				all := ""
				for r, err := range errs {
					if err == nil {
						continue
					}
					if !errors.Is(err, mp.ErrMismatch) && !errors.Is(err, mp.ErrPeerLost) {
						t.Errorf("rank %d: %v, want ErrMismatch (or the other's loss)", r, err)
					}
					all += err.Error() + "\n"
				}
				for _, w := range c.want[backend] {
					if !strings.Contains(all, w) {
						t.Errorf("no rank's error has %q:\n%s", w, all)
					}
				}
				for _, bad := range []string{"tag -", "uint8", "invalid"} {
					if strings.Contains(all, bad) {
						t.Errorf("an error shows the library's %q:\n%s", bad, all)
					}
				}
			})
		}
	}
}
