package nccl

import (
	"time"

	"github.com/courier-mp/courier/backend"
)

// issueLocked hands the queued operations (sends, and receives without
// checks) to NCCL: one group per channel, each with the channel's queued
// operations in posting order. An operation stays queued (and so do the
// later ones of its channel, which must follow it) while its channel is
// still launching its last group.
func (c *conn) issueLocked() {
	if len(c.queue) == 0 {
		c.wantFlush = false
		return
	}
	c.wantFlush = true
	const (
		undecided = iota
		open
		blocked
	)
	kept := 0
	for _, r := range c.queue {
		ch := chanOf(r)
		if c.flushState[ch] == undecided {
			c.touched = append(c.touched, ch)
			c.flushState[ch] = blocked
			if !c.chans[ch].launching() && !(c.warming && ch == worldChan(c.size)) {
				c.flushState[ch] = open
				g := c.getGroup()
				g.ch = ch
				c.pick[ch] = g
			}
		}
		if hb := r.hostBytes(); c.flushState[ch] == open && hb > 0 {
			// Host memory is staged: past stageCap bytes of it on the
			// channel, the rest waits until earlier groups are done.
			if cur := c.stagedLocked(ch) + c.pick[ch].staged; cur > 0 && cur+hb > c.stageCap {
				c.flushState[ch] = blocked
			}
		}
		if c.flushState[ch] == blocked {
			c.queue[kept] = r
			kept++
			continue
		}
		c.prepareLocked(r, c.pick[ch])
	}
	clear(c.queue[kept:])
	c.queue = c.queue[:kept]
	if kept == 0 {
		c.wantFlush = false
	}
	for _, ch := range c.touched {
		c.flushState[ch] = undecided
		g := c.pick[ch]
		c.pick[ch] = nil
		switch {
		case g == nil:
		case len(g.ops) == 0:
			c.putGroup(g)
		default:
			c.launchLocked(g)
		}
	}
	c.touched = c.touched[:0]
}

// stagedLocked returns the bytes of host memory staged for the groups of
// channel ch on the GPU.
func (c *conn) stagedLocked(ch int) int64 {
	var n int64
	for _, g := range c.chans[ch].inflight {
		n += g.staged
	}
	return n
}

// prepareLocked adds the op of queued request r to g, and sets the status
// it will complete with.
func (c *conn) prepareLocked(r *request, g *group) {
	r.stage = stageIssued
	if r.coll != 0 {
		r.st = backend.Status{Source: c.rank, Tag: -1, Count: r.recvBuf.Count}
		g.staged += r.hostBytes()
		g.ops = append(g.ops, op{r: r, peer: -1, buf: r.buf, typ: r.buf.Type, count: r.buf.Count,
			coll: r.coll, buf2: r.recvBuf, redop: r.op, root: r.root})
		return
	}
	o := op{r: r, recv: r.recv, peer: r.peer, buf: r.buf, typ: r.buf.Type, count: r.buf.Count}
	if r.recv {
		r.st = backend.Status{Source: r.peer, Tag: r.tag, Count: r.buf.Count}
	} else {
		r.st = backend.Status{Source: c.rank, Tag: r.tag, Count: r.buf.Count}
	}
	if o.bytes() == 0 {
		if c.check {
			// Its envelope says it all: the receive completes when it
			// matches it (match.go), and NCCL is not involved.
			r.complete(r.st, nil)
			return
		}
		// Without checks an empty message still pairs its send with its
		// receive (a receive must not complete before the send was
		// posted): it moves a one-byte token.
		o.token, o.typ, o.count = true, backend.Uint8, 1
	}
	if r.buf.Mem == backend.Host {
		g.staged += o.bytes()
	}
	g.ops = append(g.ops, o)
}

// launchLocked issues g and records it in flight on its channel.
func (c *conn) launchLocked(g *group) {
	ch := &c.chans[g.ch]
	if c.trace != nil {
		g.t0 = time.Now()
		c.trace.launched(g.t0)
	}
	inProgress, err := c.eng.launch(g)
	if c.trace != nil {
		g.t1 = time.Now()
	}
	ch.inflight = append(ch.inflight, g)
	if err != nil {
		c.failChanLocked(g.ch, err)
		return
	}
	if inProgress {
		g.launching = true
	} else {
		c.sealLocked(g)
	}
	// A waiter polling now sees to it (and wakes the progress goroutine
	// when it leaves with work in flight): waking it here would only take
	// the CPU from the waiter (with one core per rank, as mpirun binds).
	c.busy.Store(true)
	if c.spinners.Load() == 0 {
		c.kick()
	}
}

// sealLocked has the engine queue what follows g, and its seal.
func (c *conn) sealLocked(g *group) {
	if err := c.eng.seal(g); err != nil {
		c.failChanLocked(g.ch, err)
		return
	}
	g.sealed = true
	if c.trace != nil {
		g.t2 = time.Now()
	}
}

// getGroup takes a group from the free list.
func (c *conn) getGroup() *group {
	if n := len(c.groups); n > 0 {
		g := c.groups[n-1]
		c.groups = c.groups[:n-1]
		return g
	}
	return new(group)
}

// putGroup returns g to the free list.
func (c *conn) putGroup(g *group) {
	g.reset()
	c.groups = append(c.groups, g)
}
