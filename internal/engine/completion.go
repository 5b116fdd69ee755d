package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
)

// completion is the part of a request that signals its end. It is reused
// with the request, so the steady state allocates nothing: the wake channel
// and the timer live as long as the request object.
//
// The completer does all its work under mu: it writes st and err,
// publishes them (state 1), closes a Done channel if one was asked for and
// puts a token in wake. Readers look at state without the lock; reset,
// which recycles the request, takes mu, so it waits (on the mutex, never
// in a loop) for a completer that is still finishing, and the completer
// never touches a request that has been handed out again.
type completion struct {
	state     atomic.Uint32 // 0 pending, 1 result published
	wake      chan struct{} // capacity 1: one token per completion
	timer     *time.Timer
	timerBusy atomic.Bool // a waiter is using timer

	mu     sync.Mutex
	doneCh chan struct{}
	closed bool

	st  backend.Status
	err error
}

func (c *completion) init() {
	c.wake = make(chan struct{}, 1)
}

// complete ends the request. It is called exactly once per use, by the
// request's current owner.
func (c *completion) complete(st backend.Status, err error) {
	c.mu.Lock()
	c.st, c.err = st, err
	c.state.Store(1)
	c.closed = true
	if c.doneCh != nil {
		close(c.doneCh)
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.mu.Unlock()
}

func (c *completion) isDone() bool { return c.state.Load() >= 1 }

// Test reports completion without blocking.
func (c *completion) Test() (bool, backend.Status, error) {
	if !c.isDone() {
		return false, backend.Status{}, nil
	}
	return true, c.st, c.err
}

// Wait blocks until completion, or until timeout (if positive) passes.
func (c *completion) Wait(timeout time.Duration) (backend.Status, error) {
	// No spinning before parking: measured on 2 cores with 2 ranks, a
	// waiter that yields in a loop delays the very goroutines that would
	// complete it (1 B ping-pong: 50 µs parked at once, 66 µs after 40
	// yields). docs/benchmarks.md has the figures.
	if c.isDone() {
		return c.st, c.err
	}
	if timeout > 0 {
		// The request's own timer serves one waiter at a time; a second
		// goroutine waiting on the same request makes its own.
		var t *time.Timer
		mine := c.timerBusy.CompareAndSwap(false, true)
		switch {
		case !mine:
			t = time.NewTimer(timeout)
			defer t.Stop()
		case c.timer == nil:
			t = time.NewTimer(timeout)
			c.timer = t
		default:
			t = c.timer
			t.Reset(timeout)
		}
		select {
		case <-c.wake:
			t.Stop()
		case <-t.C:
		}
		if mine {
			c.timerBusy.Store(false)
		}
		if !c.isDone() {
			return backend.Status{}, fmt.Errorf("%w after %v", backend.ErrTimeout, timeout)
		}
	} else {
		<-c.wake
	}
	// Pass the token on, for another goroutine waiting on the same request.
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return c.st, c.err
}

// Done returns a channel closed at completion.
func (c *completion) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.doneCh == nil {
		c.doneCh = make(chan struct{})
		if c.closed {
			close(c.doneCh)
		}
	}
	return c.doneCh
}

// reset readies the completion for the next use. The caller owns the
// request: its previous use has completed and been observed, or it was
// never handed out (state 0).
func (c *completion) reset() {
	c.mu.Lock() // waits for a completer that is finishing
	select {
	case <-c.wake:
	default:
	}
	c.state.Store(0)
	c.doneCh, c.closed = nil, false
	c.st, c.err = backend.Status{}, nil
	c.mu.Unlock()
}
