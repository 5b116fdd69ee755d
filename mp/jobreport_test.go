package mp_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

// Each classic hang, made on purpose on two ranks with no launcher's
// control channel (as under mpirun or srun): the error of the wait that
// passes its timeout (rank 0's, which starts first) lists what the other
// rank waits for, asked over the job's own connections, and the wait-for
// graph with its cycle in words. Over TCP and over shared memory, whose
// links carry the question as they carry messages. (A want that starts
// "tcp:" is checked over TCP only.)
func TestTimeoutAsksTheJob(t *testing.T) {
	t.Parallel()
	big := make([]float64, 1<<17) // 1 MiB: a send that waits for its receive
	for _, c := range []struct {
		name string
		rank [2]func(c *mp.Comm, stop <-chan struct{}) error
		want []string
	}{{
		name: "head-to-head sends",
		rank: [2]func(c *mp.Comm, stop <-chan struct{}) error{
			func(c *mp.Comm, _ <-chan struct{}) error { return mp.Send(c, big, 1, 5) },
			func(c *mp.Comm, _ <-chan struct{}) error { return mp.Send(c, big, 0, 5) },
		},
		want: []string{
			"what the other ranks were waiting for (asked over the job's connections):",
			"[1] 1 operation(s) pending on rank 1 of world:",
			"[1] \tsend to rank 0, tag 5, 131072 × float64 (called at ",
			"wait-for graph: 0→1, 1→0",
			"rank 0 (send to rank 1, tag 5, 131072 × float64 at jobreport_test.go:",
			"head-to-head blocking sends: use Sendrecv, or Isend before the receive",
		},
	}, {
		name: "a tag mismatch: each receives",
		rank: [2]func(c *mp.Comm, stop <-chan struct{}) error{
			func(c *mp.Comm, _ <-chan struct{}) error {
				if err := mp.Send(c, []float32{1, 2}, 1, 8); err != nil {
					return err
				}
				_, err := mp.Recv(c, make([]float32, 2), 1, 1)
				return err
			},
			func(c *mp.Comm, _ <-chan struct{}) error {
				_, err := mp.Recv(c, make([]float32, 2), 0, 9)
				return err
			},
		},
		want: []string{
			"[1] \trecv from rank 0, tag 9, 2 × float32 (called at ",
			"[1] \tarrived from rank 0, tag 8, 2 × float32: no receive matches it yet",
			"each receives before it sends: one must send first, or use Sendrecv",
		},
	}, {
		name: "one rank in a collective, the other in a receive",
		rank: [2]func(c *mp.Comm, stop <-chan struct{}) error{
			func(c *mp.Comm, _ <-chan struct{}) error { return mp.Barrier(c) },
			func(c *mp.Comm, _ <-chan struct{}) error { _, err := mp.Recv(c, make([]byte, 1), 0, 1); return err },
		},
		want: []string{
			"[1] \trecv from rank 0, tag 1, 1 × uint8 (called at ",
			// Over shared memory, the Barrier's part is in its area, not a
			// message.
			"tcp:[1] \tarrived from rank 0, of a collective: this rank has not called it yet",
			"rank 0 (Barrier ",
			": a cycle of waits",
		},
	}, {
		name: "a receive whose sender is busy elsewhere",
		rank: [2]func(c *mp.Comm, stop <-chan struct{}) error{
			func(c *mp.Comm, _ <-chan struct{}) error { _, err := mp.Recv(c, make([]int32, 2), 1, 3); return err },
			func(c *mp.Comm, stop <-chan struct{}) error { <-stop; return nil },
		},
		want: []string{
			"[1] 0 operation(s) pending on rank 1 of world:",
			"wait-for graph: 0→1",
			"waits for rank 1, which waits for nothing: it has not made the matching call",
		},
	}} {
		for _, backend := range []string{"tcp", "shm"} {
			t.Run(c.name+"/"+backend, func(t *testing.T) {
				t.Parallel()
				errs := make([]error, 2)
				stop := make(chan struct{})
				opts := []mptest.Option{mptest.WithBackend(backend), mptest.WithInitOptions(mp.WithTimeout(400 * time.Millisecond))}
				mptest.Run(t, 2, func(t *testing.T, comm *mp.Comm) {
					r := comm.Rank()
					if r == 1 {
						// Rank 0's wait passes its timeout first, while
						// rank 1 still waits.
						time.Sleep(150 * time.Millisecond)
					}
					errs[r] = c.rank[r](comm, stop)
					if r == 0 {
						close(stop)
					}
				}, opts...)
				err := errs[0]
				if !errors.Is(err, mp.ErrTimeout) {
					t.Fatalf("rank 0: %v, want ErrTimeout", err)
				}
				for _, w := range c.want {
					w, tcpOnly := strings.CutPrefix(w, "tcp:")
					if tcpOnly && backend != "tcp" {
						continue
					}
					if !strings.Contains(err.Error(), w) {
						t.Errorf("rank 0's error lacks %q", w)
					}
				}
				if t.Failed() {
					t.Logf("rank 0's error:\n%v", err)
				}
			})
		}
	}
}

// Ranks whose waits pass their timeouts together ask each other at once:
// each answers the other's question before it aborts, so the ranks that
// timed out while the others still waited have the whole cycle in their
// errors (a rank that times out after another has aborted may find that
// one gone).
func TestTimeoutTogetherAsksEachOther(t *testing.T) {
	t.Parallel()
	big := make([]float64, 1<<17)
	for round := range 3 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			t.Parallel()
			errs := make([]error, 3)
			mptest.Run(t, 3, func(t *testing.T, comm *mp.Comm) {
				r := comm.Rank()
				errs[r] = mp.Send(comm, big, (r+1)%3, round)
			}, mptest.WithBackend("tcp"), mptest.WithInitOptions(mp.WithTimeout(300*time.Millisecond)))
			whole := 0
			for _, err := range errs {
				if errors.Is(err, mp.ErrTimeout) &&
					strings.Contains(err.Error(), "wait-for graph: 0→1, 1→2, 2→0") &&
					strings.Contains(err.Error(), "head-to-head blocking sends") {
					whole++
				}
			}
			if whole == 0 {
				t.Errorf("no rank's error has the whole cycle: %v", errs)
			}
		})
	}
}
