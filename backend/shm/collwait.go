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
	var start time.Time
	sleeping := false // the spin budget is spent: every 16th poll may sleep
	slow := false     // a pause gave the core or the P away (SpinPause)
	for i := 0; ; i++ {
		if c.step(r, i&15 == 15) {
			return nil
		}
		if i&15 != 15 {
			if c.h.e.SpinPause(i) {
				slow = true
			}
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
		// The budget and the timeout count from the 16th poll, the
		// clock's first read. It is read again every 256th poll while the
		// polls are fast: most small collectives end before it, and a
		// clock read costs as much as tens of polls (on a virtual machine,
		// a tenth of a loop of 8-byte Allreduces read it every 16th
		// poll). Once a pause has given the core away it is read every
		// 16th: such a pause can last a time slice, and 256 of them on a
		// loaded machine let a 500 ms timeout end 2.5 s late (CI, under
		// the race detector).
		var spent time.Duration
		if start.IsZero() {
			start = time.Now()
		} else if i&255 != 255 && !sleeping && !slow {
			c.h.e.SpinPause(i)
			continue
		} else {
			spent = time.Since(start) // one read of the monotonic clock
		}
		if timeout > 0 && spent >= timeout {
			return fmt.Errorf("%w after %v (a shared-memory %v waiting for rank %d)", backend.ErrTimeout, timeout, r.co.Kind, r.waitingFor())
		}
		if spent < engine.SpinBudget {
			c.h.e.SpinPause(i)
			continue
		}
		sleeping = true
		nap := collNap
		if timeout > 0 {
			nap = min(nap, timeout-spent)
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
