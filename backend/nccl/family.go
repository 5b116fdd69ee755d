package nccl

import (
	"slices"
	"sync"
	"sync/atomic"
)

// family is the communicators of one rank that share a world: the one
// Open made and those derived from it (Split), open ones only.
//
// A queued operation reaches NCCL only when a wait, test or Done on its
// own communicator flushes the queue. With several communicators, a
// program may post a send on one and then wait on another (MPI's
// WaitAll over both, in any order) while its peer receives the first
// message only after the second: the first communicator's queue must not
// wait for a wait of its own. So every wait, test and Done flushes the
// queues of the whole family (poke), not only its own communicator's.
//
// The first to join is the root, the communicator Open made: its Close and
// Abort end the derived ones too (derived).
type family struct {
	mu    sync.Mutex
	root  *conn
	conns atomic.Pointer[[]*conn] // copied on change; read without mu
}

// join adds c to the family.
func (f *family) join(c *conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.root == nil {
		f.root = c
	}
	var l []*conn
	if p := f.conns.Load(); p != nil {
		l = slices.Clone(*p)
	}
	l = append(l, c)
	f.conns.Store(&l)
}

// leave takes c out of the family.
func (f *family) leave(c *conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.conns.Load()
	if p == nil {
		return
	}
	l := slices.DeleteFunc(slices.Clone(*p), func(o *conn) bool { return o == c })
	f.conns.Store(&l)
}

// flushOthers issues what is queued on the family's communicators other
// than c (whose mutex the caller does not hold), and polls them.
func (f *family) flushOthers(c *conn) {
	p := f.conns.Load()
	if p == nil || len(*p) < 2 {
		return
	}
	for _, o := range *p {
		if o == c {
			continue
		}
		o.mu.Lock()
		if len(o.queue) > 0 {
			o.issueLocked()
			o.progressLocked()
		}
		o.mu.Unlock()
		if o.busy.Load() {
			o.kick()
		}
	}
}

// derived lists the open communicators derived from the root, when c is
// the root (none otherwise).
func (f *family) derived(c *conn) []*conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.conns.Load()
	if f.root != c || p == nil {
		return nil
	}
	return slices.DeleteFunc(slices.Clone(*p), func(o *conn) bool { return o == c })
}
