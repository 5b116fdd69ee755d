package nccl

import (
	"context"
	"fmt"
	"time"

	"github.com/courier-mp/courier/cuda"
)

// setShared gives the engine a shared stream for each other rank of a job
// of size ranks (nil entries: none for that rank).
func (d *device) setShared(shared []*cuda.Stream) {
	n := len(d.streams)
	d.shared, d.sharedLive = shared, make([]int, len(shared))
	d.live, d.cur, d.pinned = make([]int, n), make([]*cuda.Stream, n), make([]bool, n)
}

// pick returns the stream channel ch's next group goes on, and whether it
// is the pair's shared stream.
//
// Each channel (a direction between two ranks, an NCCL communicator) has
// a stream of its own, so that a group waiting on the GPU for its peer
// never holds up the other direction: a receive posted first and a send
// posted next, on each of two ranks, must not wait for each other. But a
// message that alternates direction (a ping-pong) is faster when both
// directions use one stream: on 2 H200s the C program measured 0.2–1.8 µs
// per message more with a stream per direction than with one
// (scripts/gpu-waits.sh). So the two channels of a pair also share a
// stream, used only where it cannot make one group wait for another:
//
//   - a channel that follow pinned goes on its own stream (follow made
//     that stream wait for the channel's unfinished groups elsewhere);
//   - else a channel with groups not finished goes on where its last one
//     went (its groups finish in order: the completion word only grows);
//   - else on the shared stream if no group on it is unfinished, else on
//     its own.
//
// So the shared stream holds unfinished groups of at most one channel,
// and nothing ever waits there behind another channel's work.
func (d *device) pick(ch int) (*cuda.Stream, bool) {
	own := d.streams[ch]
	if d.shared == nil || ch == worldChan(d.size) {
		return own, false
	}
	sh := d.shared[chanPeer(ch)]
	switch {
	case d.pinned[ch]:
		return own, false
	case d.live[ch] > 0:
		return d.cur[ch], d.cur[ch] == sh && sh != nil
	case sh != nil && d.sharedLive[chanPeer(ch)] == 0:
		return sh, true
	}
	return own, false
}

// launched records that a group of channel ch went on stream s.
func (d *device) launched(ch int, st *staged, s *cuda.Stream, onShared bool) {
	st.stream, st.onShared = s, onShared
	if d.shared == nil {
		return
	}
	d.live[ch]++
	d.cur[ch] = s
	d.pinned[ch] = false
	if onShared {
		d.sharedLive[chanPeer(ch)]++
	}
}

// finished records that a group of channel ch, launched on st.stream, is
// done (seen done: release alone, for a group taken off the GPU by a
// failure, leaves it counted, so that nothing is ever queued behind it).
func (d *device) finished(ch int, st *staged) {
	if d.shared == nil || st.stream == nil {
		return
	}
	d.live[ch]--
	if st.onShared {
		d.sharedLive[chanPeer(ch)]--
	}
}

// curStream is the stream of channel ch's last group (its own before any).
func (d *device) curStream(ch int) *cuda.Stream {
	if d.cur != nil && d.cur[ch] != nil {
		return d.cur[ch]
	}
	return d.streams[ch]
}

// waitOn implements engine.
func (d *device) waitOn(g *group, s *cuda.Stream) error {
	st := g.res.(*staged)
	if d.flags != nil {
		d.waitedOn = true
		return s.WaitValue64(d.flags.of(g.ch), st.seq)
	}
	return s.WaitEvent(st.ev)
}

// follow implements engine: an event recorded on s, waited for by the
// channel's own stream, to which the channel's next group is pinned (the
// wait takes the event as recorded, so the event goes straight back to
// the free list). If the channel's unfinished groups are on the shared
// stream, the own stream also waits for them, so that its groups still
// finish in order.
func (d *device) follow(ch int, s *cuda.Stream) error {
	own := d.streams[ch]
	if cur, onShared := d.pick(ch); onShared && d.live[ch] > 0 {
		if err := d.order(own, cur); err != nil {
			return fmt.Errorf("nccl: ordering a channel's stream after the shared one: %w", err)
		}
	}
	if err := d.order(own, s); err != nil {
		return fmt.Errorf("nccl: ordering a channel after the caller's stream: %w", err)
	}
	if d.pinned != nil {
		d.pinned[ch] = true
	}
	return nil
}

// order makes stream later wait for what is queued on stream first now.
func (d *device) order(later, first *cuda.Stream) error {
	ev, err := d.getEvent()
	if err != nil {
		return err
	}
	defer func() { d.events = append(d.events, ev) }()
	if err := ev.Record(first); err != nil {
		return err
	}
	return later.WaitEvent(ev)
}

// waitStream polls stream s, backing off from 1 µs to 1 ms between
// polls, until its work is done (nil), the query fails, or ctx ends (its
// error).
func waitStream(ctx context.Context, s *cuda.Stream) error {
	for delay := time.Microsecond; ; delay = min(2*delay, time.Millisecond) {
		done, err := s.Query()
		if err != nil || done {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(delay)
	}
}
