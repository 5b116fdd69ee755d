package nccl

import (
	"fmt"
	"runtime"
	"time"

	"github.com/courier-mp/courier/backend"
)

// poke flushes the queue and polls the groups in flight, without blocking,
// and flushes the queues of the other communicators of its family
// (family.flushOthers).
func (c *conn) poke() {
	c.mu.Lock()
	c.issueLocked()
	c.progressLocked()
	c.mu.Unlock()
	c.fam.flushOthers(c)
}

// wait flushes the queue and waits for r to complete, at most timeout if
// positive. It polls from this goroutine for up to spinFor, then sleeps
// on r's Done channel while the progress goroutine polls.
func (c *conn) wait(r *request, timeout time.Duration) error {
	if r.ipc != nil {
		return c.waitIPCRequest(r, timeout)
	}
	c.spinners.Add(1)
	spinning := true
	defer func() {
		if spinning {
			c.spinners.Add(-1)
			if c.busy.Load() {
				c.kick()
			}
		}
	}()
	if c.trace != nil {
		defer func() {
			now := time.Now()
			c.mu.Lock()
			c.trace.returned(now)
			c.mu.Unlock()
		}()
	}
	c.poke()
	if r.done.Load() {
		return nil
	}
	start := time.Now()
	now := start
	var deadline time.Time
	if timeout > 0 {
		deadline = start.Add(timeout)
	}
	for i := 1; !r.done.Load(); i++ {
		if i%spinClock == 0 {
			now = time.Now()
		}
		if timeout > 0 && !now.Before(deadline) {
			return fmt.Errorf("%w after %v", backend.ErrTimeout, timeout)
		}
		if now.Sub(start) < spinFor {
			if i%spinYield == 0 {
				runtime.Gosched()
			}
			c.mu.Lock()
			c.progressLocked()
			c.mu.Unlock()
			continue
		}
		// Sleep until completion, a deadline, or a periodic re-poll (a
		// safety net: the progress goroutine should see to everything).
		if spinning {
			spinning = false
			c.spinners.Add(-1)
		}
		c.kick()
		nap := 10 * time.Millisecond
		if timeout > 0 {
			nap = min(nap, deadline.Sub(now))
		}
		t := time.NewTimer(nap)
		select {
		case <-r.doneChan():
		case <-t.C:
		}
		t.Stop()
		c.poke()
		now = time.Now()
	}
	return nil
}

// waitIPCRequest waits for a request of the IPC path. Polling the groups
// here would only hold the mutex the path needs (a goroutine waiting for
// a Go mutex that a spinner takes back at once waits about a millisecond
// before it gets its turn). While it spins, the waiter polls the host
// connection, which carries the path's DESC and DONE messages, and runs
// the path's stages that no one else is running (pumpIPC): it takes the
// messages as they arrive, copies them and answers them itself, with no
// goroutine to wake. In a rank that mpirun binds to one core a woken
// goroutine waits for the spinning one's time slice, milliseconds (a
// ping-pong took 3.6 ms a message on the H200 that way, 0.2 ms unbound).
// Where the connection cannot be polled it yields instead. After spinFor
// it sleeps on the request's Done channel.
func (c *conn) waitIPCRequest(r *request, timeout time.Duration) error {
	c.poke() // what is queued on the channels goes to NCCL, as any wait does
	start := time.Now()
	polls := c.ctl != nil && c.ctl.polls()
	pumping := false // counted among the path's pumpers (ipcPath.pump)
	defer func() {
		if pumping {
			c.ipc.unpump()
		}
	}()
	for i := 1; !r.done.Load(); i++ {
		if polls {
			if !pumping {
				c.ipc.pump()
				pumping = true
			}
			left := time.Duration(0)
			if timeout > 0 {
				left = max(timeout-time.Since(start), time.Nanosecond)
			}
			if c.ctl.spinUntil(r.pumped, left) {
				break
			}
			runtime.Gosched()
		} else if i%spinClock != 0 {
			runtime.Gosched()
			continue
		}
		now := time.Now()
		if timeout > 0 && now.Sub(start) >= timeout {
			return fmt.Errorf("%w after %v", backend.ErrTimeout, timeout)
		}
		if now.Sub(start) < spinFor {
			continue
		}
		if pumping {
			// A sleeper runs no stage: their goroutines must.
			c.ipc.unpump()
			pumping = false
		}
		var t <-chan time.Time
		if timeout > 0 {
			tm := time.NewTimer(timeout - now.Sub(start))
			defer tm.Stop()
			t = tm.C
		}
		select {
		case <-r.doneChan():
		case <-t:
			return fmt.Errorf("%w after %v", backend.ErrTimeout, timeout)
		}
	}
	return nil
}
