package mp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// TestMasterWorkerSurvivesLostWorker: a master hands out 12 tasks to 3
// workers and collects results with receives from AnySource; worker 3
// aborts as its first task comes. The master's pending wildcard receive
// ends with ErrPeerLost naming rank 3; the master hands its task to the
// others and finishes every task.
func TestMasterWorkerSurvivesLostWorker(t *testing.T) {
	const tasks, tagTask, tagResult, stop = 12, 1, 2, -1
	var done [tasks]int64
	var lostSeen []int
	err := ranktest.Go(4, func(comm *mp.Comm) error {
		if comm.Rank() != 0 {
			served := 0
			for {
				task := []int64{0}
				if _, err := mp.Recv(comm, task, 0, tagTask); err != nil {
					return err
				}
				if task[0] == stop {
					return nil
				}
				if comm.Rank() == 3 && served == 0 {
					comm.Abort(errors.New("worker 3 fails"))
					return nil
				}
				served++
				if err := mp.Send(comm, []int64{task[0], task[0] * task[0]}, 0, tagResult); err != nil {
					return err
				}
			}
		}
		owner := map[int]int64{} // worker → task it holds
		var idle []int
		next := int64(0)
		var redo []int64
		got := 0
		give := func(w int) error {
			var task int64
			switch {
			case len(redo) > 0:
				task, redo = redo[0], redo[1:]
			case next < tasks:
				task, next = next, next+1
			default:
				idle = append(idle, w)
				return nil
			}
			owner[w] = task
			return mp.Send(comm, []int64{task}, w, tagTask)
		}
		for w := 1; w < comm.Size(); w++ {
			if err := give(w); err != nil {
				return err
			}
		}
		for got < tasks {
			res := make([]int64, 2)
			st, err := mp.Recv(comm, res, mp.AnySource, tagResult)
			if errors.Is(err, mp.ErrPeerLost) {
				oe, ok := errors.AsType[*mp.OpError](err)
				if !ok {
					return err
				}
				w, ok := oe.LostRank()
				if !ok {
					return fmt.Errorf("lost rank not named: %w", err)
				}
				lostSeen = append(lostSeen, w)
				if task, held := owner[w]; held {
					redo = append(redo, task)
					delete(owner, w)
				}
				if len(idle) > 0 {
					w, idle = idle[0], idle[1:]
					if err := give(w); err != nil {
						return err
					}
				}
				continue // post the receive again
			}
			if err != nil {
				return err
			}
			done[res[0]] = res[1]
			got++
			delete(owner, st.Source)
			if err := give(st.Source); err != nil {
				return err
			}
		}
		for _, w := range idle {
			if err := mp.Send(comm, []int64{stop}, w, tagTask); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []int{3}, lostSeen)
	for i, v := range done {
		assert.Equal(t, int64(i*i), v, "task %d", i)
	}
}

// TestInitErrorsMatchSentinels: a launch that cannot be right (an invalid
// job, a malformed rendezvous address, a size mismatch) fails Init
// with an error that matches mp's sentinels, not only the bootstrap's.
func TestInitErrorsMatchSentinels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := mp.Init(ctx, mp.WithJob(bootstrap.Job{Rank: 3, Size: 2}), mp.WithBackend("tcp"))
	require.ErrorIs(t, err, mp.ErrInvalid)
	_, err = mp.Init(ctx, mp.WithJob(bootstrap.Job{Rank: 1, Size: 2, Key: "k", Addr: "no-port"}), mp.WithBackend("tcp"))
	require.ErrorIs(t, err, mp.ErrInvalid)
	assert.ErrorContains(t, err, "COURIER_ADDR")

	jobs, err := ranktest.Jobs(2)
	require.NoError(t, err)
	wrong := jobs[1]
	wrong.Size = 3
	errs := make([]error, 2)
	// Once the wrong rank is refused, no rank is left to come: the end of
	// rank 0's context ends its wait for late ones.
	ctx0, cancel0 := context.WithCancel(ctx)
	defer cancel0()
	var wg sync.WaitGroup
	for r, j := range []bootstrap.Job{jobs[0], wrong} {
		wg.Go(func() {
			ictx := ctx
			if r == 0 {
				ictx = ctx0
			}
			c, err := mp.Init(ictx, mp.WithJob(j), mp.WithBackend("tcp"), mp.WithEnv(func(string) string { return "" }))
			if err == nil {
				c.Close()
			}
			errs[r] = err
			if r == 1 {
				cancel0()
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		require.ErrorIs(t, err, mp.ErrInvalid, "rank %d", r)
		assert.ErrorContains(t, err, "size mismatch", "rank %d", r)
	}
}
