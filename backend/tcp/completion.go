package tcp

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
)

// completion is the part of a request that signals its end. It is reused
// with the request, so the steady state allocates nothing: the wake channel
// and the timer live as long as the request object.
//
// The completer writes st and err, closes a Done channel if one was asked
// for, puts a token in wake, and stores state last: once a waiter sees the
// state, the completer no longer touches the request.
type completion struct {
	state atomic.Uint32 // 0 pending, 1 done
	wake  chan struct{} // capacity 1: one token per completion
	timer *time.Timer

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
	c.st, c.err = st, err
	c.mu.Lock()
	c.closed = true
	if c.doneCh != nil {
		close(c.doneCh)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.state.Store(1)
}

func (c *completion) isDone() bool { return c.state.Load() == 1 }

// Test reports completion without blocking.
func (c *completion) Test() (bool, backend.Status, error) {
	if !c.isDone() {
		return false, backend.Status{}, nil
	}
	return true, c.st, c.err
}

// spinRounds bounds how long a waiter polls before it parks: polling
// catches a completion that comes within microseconds without a wake-up,
// and yielding lets the rank's reader goroutine run on the same core.
const spinRounds = 40

// Wait blocks until completion, or until timeout (if positive) passes.
func (c *completion) Wait(timeout time.Duration) (backend.Status, error) {
	for i := 0; i < spinRounds; i++ {
		if c.isDone() {
			return c.st, c.err
		}
		runtime.Gosched()
	}
	if timeout > 0 {
		if c.timer == nil {
			c.timer = time.NewTimer(timeout)
		} else {
			c.timer.Reset(timeout)
		}
		select {
		case <-c.wake:
			c.timer.Stop()
		case <-c.timer.C:
			if !c.isDone() {
				return backend.Status{}, fmt.Errorf("%w after %v", backend.ErrTimeout, timeout)
			}
		}
	} else {
		<-c.wake
	}
	// Pass the token on, for another goroutine waiting on the same request.
	select {
	case c.wake <- struct{}{}:
	default:
	}
	for !c.isDone() { // the completer stores the state just after the token
		runtime.Gosched()
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
// request: its previous use has completed and been observed.
func (c *completion) reset() {
	select {
	case <-c.wake:
	default:
	}
	c.state.Store(0)
	c.mu.Lock()
	c.doneCh, c.closed = nil, false
	c.mu.Unlock()
	c.st, c.err = backend.Status{}, nil
}
