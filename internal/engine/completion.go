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
// One word, state, says whether the result is published (stDone) and
// whether anyone needs more than that word (stSlow: a waiter that may
// block on wake, or a Done channel). The completer writes st and err and
// then publishes. With no one blocked it is one compare-and-swap, after
// which it never touches the request again, so a poller that sees the
// result may recycle the request at once: a ping-pong's requests take no
// lock and no channel operation. When stSlow is set, the completer
// publishes under mu, closes the Done channel and puts a token in wake;
// reset then takes mu, so it waits (on the mutex, never in a loop) for a
// completer that is still finishing. stSlow is set by compare-and-swap
// too, so a completer either sees it (and wakes) or has published first
// (and the waiter sees the result instead of blocking).
type completion struct {
	state     uint32        // stDone, stSlow: atomic but for reset's store (see reset)
	wake      chan struct{} // capacity 1: one token per completion
	timer     *time.Timer
	timerBusy atomic.Bool // a waiter is using timer

	mu     sync.Mutex
	doneCh chan struct{}
	fn     func() // notify's: called once by the completer; under mu

	st  backend.Status
	err error
}

const (
	stDone uint32 = 1 << 0 // the result is published
	stSlow uint32 = 1 << 1 // a waiter may block on wake, or Done was asked for
)

func (c *completion) init() {
	c.wake = make(chan struct{}, 1)
}

// complete ends the request. It is called exactly once per use, by the
// request's current owner.
func (c *completion) complete(st backend.Status, err error) {
	c.st, c.err = st, err
	for {
		s := atomic.LoadUint32(&c.state)
		if s&stSlow != 0 {
			break
		}
		if atomic.CompareAndSwapUint32(&c.state, s, s|stDone) {
			return // nothing after this touches the request
		}
	}
	c.mu.Lock()
	atomic.StoreUint32(&c.state, atomic.LoadUint32(&c.state)|stDone)
	if c.doneCh != nil {
		close(c.doneCh)
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	if c.fn != nil {
		// Under mu: reset waits for it, so it never runs after the
		// request's next use has begun.
		c.fn()
		c.fn = nil
	}
	c.mu.Unlock()
}

// slow sets stSlow unless the result is already published, and reports
// whether it set it (false: the request is done).
func (c *completion) slow() bool {
	for {
		s := atomic.LoadUint32(&c.state)
		if s&stDone != 0 {
			return false
		}
		if s&stSlow != 0 || atomic.CompareAndSwapUint32(&c.state, s, s|stSlow) {
			return true
		}
	}
}

func (c *completion) isDone() bool { return atomic.LoadUint32(&c.state)&stDone != 0 }

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
	if !c.slow() {
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
		if !c.slow() {
			// Completed before it was asked for. stSlow still marks the
			// channel for reset to drop.
			close(c.doneCh)
			atomic.OrUint32(&c.state, stSlow)
		}
	}
	return c.doneCh
}

// notify has f called once the request completes: by the goroutine that
// completes it, after the result is published and under mu (so f must
// not block nor touch the request: a poller may see the result, and Wait
// or Test report it, before f has run; reset, and so Release, waits for
// it), or at once by this one if it has completed already. One f per
// use; reset forgets one never called.
func (c *completion) notify(f func()) {
	c.mu.Lock()
	pending := c.slow()
	if pending {
		c.fn = f
	}
	c.mu.Unlock()
	if !pending {
		f()
	}
}

// reset readies the completion for the next use. The caller owns the
// request: its previous use has completed and been observed, or it was
// never handed out (state 0).
func (c *completion) reset() {
	if atomic.LoadUint32(&c.state)&stSlow != 0 {
		c.mu.Lock() // waits for a completer that is finishing
		select {
		case <-c.wake:
		default:
		}
		c.doneCh = nil
		c.fn = nil
		c.mu.Unlock()
	}
	c.st, c.err = backend.Status{}, nil
	// A plain store, not an atomic one (on amd64 a locked exchange, a
	// full fence, on every message): no other goroutine looks at the
	// word now, and the request reaches the next one that does through
	// a synchronising hand-over (the engine's spare slot or pool, then
	// its lock or a link), which publishes this store with it.
	c.state = 0
}
