package mp

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCollOrderFastPath: a blocking collective that finds nothing else
// started takes the turn by the fast path; a ticket taken while it holds
// it (a non-blocking collective started meanwhile) is not kept waiting to
// be issued, is served only once the holder gives the turn back, and the
// fast path is free again once every ticket is served.
func TestCollOrderFastPath(t *testing.T) {
	var c Comm
	o := &c.order
	c.collLock(0, 1, 0)
	require.Equal(t, int32(orderFast), o.fast.Load(), "the first collective takes the fast path")

	o.mu.Lock()
	tk := o.take() // does not wait for the holder
	o.mu.Unlock()
	assert.Equal(t, uint64(1), tk, "the ticket after the holder's")
	assert.Equal(t, int32(orderFastWanted), o.fast.Load())

	served := make(chan struct{})
	go func() {
		o.mu.Lock()
		o.await(tk)
		o.mu.Unlock()
		close(served)
	}()
	select {
	case <-served:
		t.Fatal("the ticket was served while the fast path held the turn")
	case <-time.After(20 * time.Millisecond):
	}
	c.collUnlock()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the ticket was not served once the holder gave the turn back")
	}
	assert.Equal(t, int32(orderTickets), o.fast.Load(), "a ticket is out")

	o.mu.Lock() // the ticket's holder gives the turn back
	o.serve()
	o.mu.Unlock()
	assert.Equal(t, int32(orderFree), o.fast.Load(), "every ticket served: the fast path is free again")
	c.collLock(0, 2, 0)
	assert.Equal(t, int32(orderFast), o.fast.Load())
	assert.Equal(t, uint32(2), c.collCall.Load(), "the call is recorded")
	c.collUnlock()
	assert.Equal(t, int32(orderFree), o.fast.Load())
}

// TestCollOrderExclusive: goroutines that take the turn at once, some by
// collLock (fast path or tickets) and some by tickets alone (as
// non-blocking collectives do), never hold it together, and each gets it
// in the order of its ticket.
func TestCollOrderExclusive(t *testing.T) {
	var c Comm
	o := &c.order
	const workers, rounds = 6, 2000
	var inside, held atomic.Int32
	var wg sync.WaitGroup
	hold := func() {
		if inside.Add(1) != 1 {
			held.Add(1)
		}
		for range 10 {
			_ = o.fast.Load() // a little work inside
		}
		inside.Add(-1)
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if w%2 == 0 {
					c.collLock(0, 1, 0)
					hold()
					c.collUnlock()
					continue
				}
				o.mu.Lock()
				tk := o.take()
				o.await(tk)
				o.mu.Unlock()
				hold()
				o.mu.Lock()
				o.serve()
				o.mu.Unlock()
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(time.Minute):
		t.Fatalf("the goroutines did not all get their turns (issued %d, served %d, state %d)", o.issued, o.served, o.fast.Load())
	}
	assert.Zero(t, held.Load(), "two goroutines held the turn together")
	assert.Equal(t, int32(orderFree), o.fast.Load(), "every ticket served: the fast path is free")
	assert.Equal(t, o.issued, o.served)
}
