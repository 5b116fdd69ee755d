package nccl

import (
	"fmt"
	"time"
)

// kick wakes the progress goroutine.
func (c *conn) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run is the progress goroutine: while groups are in flight it polls
// them, backing off from minPoll to maxPoll, so that requests complete
// (and their Done channels close) while nobody waits in Wait.
func (c *conn) run() {
	defer c.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		}
		for delay := minPoll; ; delay = min(2*delay, maxPoll) {
			// While a waiter polls, polling here too would only contend
			// for the mutex (and delay the waiter): look again later.
			busy := true
			if c.spinners.Load() == 0 {
				c.mu.Lock()
				busy = c.progressLocked()
				c.mu.Unlock()
			} else {
				delay = maxPoll
			}
			if !busy {
				break
			}
			t.Reset(delay)
			select {
			case <-c.stop:
				return
			case <-c.wake:
				t.Stop()
				delay = minPoll / 2
			case <-t.C:
			}
		}
	}
}

// progressLocked advances every channel: a launching group is sealed once
// NCCL has it on the stream, finished groups complete their requests, and
// a wanted flush is retried. It reports whether work is still in flight
// (the progress goroutine polls while it is).
func (c *conn) progressLocked() bool {
	busy := false
	for i := range c.chans {
		if len(c.chans[i].inflight) > 0 {
			c.progressChanLocked(i)
			busy = busy || len(c.chans[i].inflight) > 0
		}
	}
	for p := range c.peers {
		if c.peers[p].issueWanted {
			c.issueRecvsLocked(p)
		}
	}
	c.busy.Store(busy)
	if c.wantFlush && len(c.queue) > 0 {
		c.issueLocked() // launches set busy
	}
	return c.busy.Load()
}

// progressChanLocked advances channel i.
func (c *conn) progressChanLocked(i int) {
	ch := &c.chans[i]
	// ncclCommGetAsyncError: whether the last launch is on the stream yet,
	// and any failure NCCL found in its own threads. Asked at every poll
	// while a launch is in progress, otherwise every asyncCheckPolls polls:
	// a waiter polls in a tight loop, and NCCL's own threads need the
	// communicator meanwhile.
	launching := ch.launching()
	inProgress := false
	if ch.sinceCheck++; launching || ch.sinceCheck >= asyncCheckPolls {
		ch.sinceCheck = 0
		var err error
		inProgress, err = c.eng.settle(i)
		if err != nil {
			c.failChanLocked(i, err)
			return
		}
	}
	if last := ch.inflight[len(ch.inflight)-1]; last.launching && !inProgress {
		last.launching = false
		c.sealLocked(last)
		if len(ch.inflight) == 0 {
			return
		}
	}
	for len(ch.inflight) > 0 {
		g := ch.inflight[0]
		if !g.sealed {
			break
		}
		done, err := c.eng.poll(g)
		g.polls++
		if err != nil {
			c.failChanLocked(i, err)
			return
		}
		if !done {
			break
		}
		ch.graceUntil = time.Time{}
		copy(ch.inflight, ch.inflight[1:])
		ch.inflight[len(ch.inflight)-1] = nil
		ch.inflight = ch.inflight[:len(ch.inflight)-1]
		if c.trace != nil {
			c.trace.add(g, time.Now())
		}
		c.eng.finish(g)
		for j := range g.ops {
			if r := g.ops[j].r; r != nil {
				r.complete(r.st, r.verdict)
			} else if m := g.ops[j].early; m != nil {
				c.landedLocked(m)
			} else {
				c.connecting-- // first contact (connectAll)
			}
		}
		c.putGroup(g)
	}
	// A channel whose peer is gone gets lostGrace after its last progress
	// to finish what is on the GPU: the peer delivered what it sent before
	// it left, and a receive of anything else never completes.
	if lost := c.lostOfLocked(i); lost != nil && len(ch.inflight) > 0 {
		now := time.Now()
		switch {
		case ch.graceUntil.IsZero():
			ch.graceUntil = now.Add(lostGrace)
		case now.After(ch.graceUntil):
			c.failChanLocked(i, fmt.Errorf("%w (its operations on the GPU did not finish within %v; the channel was aborted)", lost, lostGrace))
		}
	}
}

// lostOfLocked returns why channel i's peer is gone (for the channel of
// all ranks, the first rank found gone), or nil.
func (c *conn) lostOfLocked(i int) error {
	if i != worldChan(c.size) {
		return c.peers[chanPeer(i)].lost
	}
	for p := range c.peers {
		if c.peers[p].lost != nil {
			return c.peers[p].lost
		}
	}
	return nil
}
