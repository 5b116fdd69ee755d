package mp

import (
	"context"
	"sync"
)

// The Inits of one process that read the launcher's environment (those
// without WithJob) are numbered in the order they are called, from 0:
// the number is the rendezvous generation (bootstrap.Job.Generation), so
// that the ranks' first Inits meet each other, their second Inits each
// other, and so on, and never one another's. Their rendezvous (from
// reading the environment to the end of the backend's exchange) run one
// at a time, in that order: two Inits called at once on every rank both
// succeed, the one each process called first meeting the others' first.
// Every rank must therefore call Init the same number of times; an Init
// that fails still counts.

// initTurns hands out the numbers and the turns.
var initTurns struct {
	mu        sync.Mutex
	issued    int              // numbers handed out
	next      int              // the number whose turn it is
	abandoned map[int]struct{} // numbers that gave up before their turn
	wake      chan struct{}    // closed when next moves
}

// takeInitTurn returns the number of an Init that starts now.
func takeInitTurn() int {
	t := &initTurns
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.issued
	t.issued++
	return n
}

// waitInitTurn waits until the Inits numbered below gen have finished
// their rendezvous, or ctx ends.
func waitInitTurn(ctx context.Context, gen int) error {
	t := &initTurns
	for {
		t.mu.Lock()
		if t.next == gen {
			t.mu.Unlock()
			return nil
		}
		if t.wake == nil {
			t.wake = make(chan struct{})
		}
		wake := t.wake
		t.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// endInitTurn ends Init gen's rendezvous (or its wait for it): the next
// Init may go on.
func endInitTurn(gen int) {
	t := &initTurns
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next != gen {
		if t.abandoned == nil {
			t.abandoned = map[int]struct{}{}
		}
		t.abandoned[gen] = struct{}{}
		return
	}
	t.next++
	for {
		if _, ok := t.abandoned[t.next]; !ok {
			break
		}
		delete(t.abandoned, t.next)
		t.next++
	}
	if t.wake != nil {
		close(t.wake)
		t.wake = nil
	}
}
