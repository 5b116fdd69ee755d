package shm

import (
	"fmt"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// collNap bounds one sleep of a collective's waiter on its bell: a
// backstop, since every writer rings the bells, and a lost peer or the
// end of the transport rings this rank's too (link.finish).
const collNap = 10 * time.Millisecond

// await advances r until it is done, a peer is lost, the communicator
// ends (every one of these completes r), or timeout (if positive) passes
// (r stays pending and await returns an error matching ErrTimeout);
// under c.mu.
//
// It polls the other ranks' words for engine.SpinBudget, pausing between
// polls as the engine's waiters do (giving the core away when ranks
// outnumber cores, so a rank never spins while the rank it waits for
// cannot run), then sleeps on this rank's bell, which the writers ring.
func (c *Coll) await(r *collReq, timeout time.Duration) error {
	if !c.h.enter() {
		c.end(r, c.closedErr(r))
		return nil
	}
	if c.step(r, false) { // most often, when the others are there first
		c.h.exit()
		return nil
	}
	defer c.h.exit()
	bell := c.areas[c.rank].bell
	var spinUntil, deadline time.Time
	for i := 0; ; i++ {
		if c.step(r, i&15 == 15) {
			return nil
		}
		if i&15 != 15 {
			c.h.e.SpinPause(i)
			continue
		}
		if err := c.down(r); err != nil {
			// The rank may have done its part and then left (a rank that
			// returns from its last collective and closes): look once more,
			// now that its leaving is seen, before calling it lost.
			if c.step(r, true) {
				return nil
			}
			if err := c.down(r); err != nil {
				c.end(r, err)
				return nil
			}
			continue
		}
		// The clock is read from the 16th poll on: most small collectives
		// end before it (a clock read costs as much as several polls).
		now := time.Now()
		if spinUntil.IsZero() {
			spinUntil = now.Add(engine.SpinBudget)
			if timeout > 0 {
				deadline = now.Add(timeout)
			}
		}
		if !deadline.IsZero() && !now.Before(deadline) {
			return fmt.Errorf("%w after %v (a shared-memory %v waiting for rank %d)", backend.ErrTimeout, timeout, r.co.Kind, r.waitingFor())
		}
		if now.Before(spinUntil) {
			c.h.e.SpinPause(i)
			continue
		}
		nap := collNap
		if !deadline.IsZero() {
			nap = min(nap, deadline.Sub(now))
		}
		v := bell.Arm()
		shmem.SleepFence() // the writers publish without a fence
		if c.step(r, true) {
			bell.Disarm()
			return nil
		}
		bell.Sleep(v, nap)
		if bell.Armed() {
			bell.Disarm()
		}
	}
}
