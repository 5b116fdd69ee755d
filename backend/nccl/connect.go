package nccl

import (
	"context"
	"fmt"
	"time"
)

// connectAll connects every channel before any user traffic: each rank
// sends one byte on each of its send channels and receives one on each of
// its receive channels, all at once, and waits for them (bounded by ctx).
// ops(p) gives the send to and the receive from rank p.
//
// NCCL sets a connection up lazily, inside the first operation that needs
// it, and that setup needs the peer (measured with NCCL 2.28.3: rank 0
// grouping a send and a receive while rank 1 receives, then sends, hangs
// as the pair's first traffic, and works after one symmetric exchange);
// doing it here keeps it out of the first user operation, whose wait would
// then include it. A rank has 2(N−1) channels, each an NCCL communicator of two
// ranks with its own connection buffers: right for the one or few hosts
// courier runs on today; a job of hundreds of ranks would need channels
// made on first use instead.
func (c *conn) connectAll(ctx context.Context, ops func(p int) (send, recv op)) error {
	if c.size == 1 {
		return nil
	}
	c.mu.Lock()
	for p := range c.size {
		if p == c.rank || c.ipcPeerOf(p) != nil {
			continue
		}
		s, r := ops(p)
		c.connecting += 2
		for _, o := range []op{s, r} {
			g := c.getGroup()
			g.ch = sendChan(p)
			if o.recv {
				g.ch = recvChan(p)
			}
			g.ops = append(g.ops, o)
			c.launchLocked(g)
		}
	}
	c.mu.Unlock()
	for delay := time.Microsecond; ; delay = min(2*delay, time.Millisecond) {
		c.mu.Lock()
		c.progressLocked()
		// Only first contact counts: a peer that has connected may have
		// sent this rank a message already (an early receive of checked
		// mode), which completes only once the peer flushes it.
		busy := c.connecting > 0
		var err error
		for i := range c.chans {
			if err = c.chans[i].err; err != nil {
				break
			}
		}
		c.mu.Unlock()
		if err != nil {
			return fmt.Errorf("nccl: connecting the ranks: %w", err)
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nccl: connecting the ranks (a one-byte message on every channel) did not finish: %w", ctx.Err())
		case <-time.After(delay):
		}
	}
}

// startWarm connects the communicator of every rank in the background:
// NCCL connects a communicator's ranks in the first operation that needs
// them, which on 2 H200s took 0.9 s, longer than the rest of Open, and
// which a blocking communicator does inside the call, waiting for every
// rank. Done in a user's first collective, that wait would hold the
// communicator's mutex and escape COURIER_TIMEOUT; done in Open, every
// program would pay for it. So warm (the engine's warmWorld: the call,
// then a wait for its stream) runs on a goroutine of its own, outside the
// mutex, right after Open on every rank, and the channel of every rank
// takes nothing until it has returned (issueLocked): a collective posted
// meanwhile waits in the queue, its wait bounded as any other.
//
// The communicator is never aborted while the call is in NCCL (an abort
// frees what the call uses): a failure of the channel meanwhile
// (failChanLocked) only ends the wait for the stream, and the abort
// follows here, once warm has returned. Close waits for it (stopWarm).
//
// prepare runs with the mutex held and returns the call to make.
func (c *conn) startWarm(prepare func() func(quit <-chan struct{}) error) {
	w := worldChan(c.size)
	c.mu.Lock()
	warm := prepare()
	c.warming = true
	c.warmDone = make(chan struct{})
	c.warmQuit = make(chan struct{})
	c.mu.Unlock()
	go func() {
		defer close(c.warmDone)
		err := warm(c.warmQuit)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.warming = false
		switch ch := &c.chans[w]; {
		case ch.err == nil && err != nil:
			c.failChanLocked(w, fmt.Errorf("nccl: connecting the communicator of every rank (an Allreduce of one byte): %w", err))
		case ch.err != nil && !c.closing:
			// Failed while warm ran: abort now (Close leaves it to
			// engine.close).
			if abort := c.eng.detach(w); abort != nil {
				c.aborts.add()
				go c.abortChan(abort, nil, ch.err)
			}
		}
		c.kick()
	}()
}

// quitWarmLocked makes warm stop waiting for its stream (Close, or a
// failure of the channel of every rank).
func (c *conn) quitWarmLocked() {
	if c.warming && !c.warmQuitting {
		c.warmQuitting = true
		close(c.warmQuit)
	}
}

// stopWarm is Close's part in startWarm: it waits for warm to return, at
// most abortBound (its call waits in NCCL only for ranks that have not
// made theirs, which every rank does right after Open). Past that, the
// engine is marked stuck: close then leaves the memory the call may use.
func (c *conn) stopWarm() error {
	if c.warmDone == nil {
		return nil
	}
	c.mu.Lock()
	c.quitWarmLocked()
	c.mu.Unlock()
	select {
	case <-c.warmDone:
		return nil
	case <-time.After(abortBound):
		if d, ok := c.eng.(*device); ok {
			d.stuck.Store(true)
		}
		return fmt.Errorf("nccl: connecting the communicator of every rank had not returned %v after Close (a rank never made its call?); its memory was left", abortBound)
	}
}
