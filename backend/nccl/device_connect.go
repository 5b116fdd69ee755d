package nccl

import (
	"context"
	"fmt"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// connectBlocking makes the first contact on every channel of blocking
// communicators: a one-byte send to each other rank and a one-byte
// receive from each, all in one NCCL group over every channel (NCCL
// connects the communicators of a group at once; the call returns only
// once every peer has posted its side), then waits for every channel's
// stream. The group runs on a goroutine of its own so that ctx bounds it;
// if ctx ends first, the call is left to finish or not (a blocking call
// cannot be aborted) and the error says so.
func (d *device) connectBlocking(ctx context.Context, rank, size int) error {
	var ops cOps
	base := d.warm.Ptr()
	for p := range size {
		if p == rank || d.skip != nil && d.skip[p] {
			continue
		}
		ops.add(d.comms[sendChan(p)], d.streams[sendChan(p)].Handle(), base, 1, channelPeer(sendChan(p)), ncclUint8, false)
		ops.add(d.comms[recvChan(p)], d.streams[recvChan(p)].Handle(), base+uintptr(1+p), 1, channelPeer(recvChan(p)), ncclUint8, true)
	}
	if len(ops) == 0 {
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		_, _, err := d.lib.group(d.hooks, ops, false)
		for _, s := range d.streams {
			if err == nil && s != nil {
				err = waitStream(ctx, s)
			}
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("nccl: connecting the ranks (a one-byte message on every channel): %w", err)
		}
		return nil
	case <-ctx.Done():
		d.stuck.Store(true)
		return fmt.Errorf("nccl: connecting the ranks (a one-byte message on every channel) did not finish: did every rank reach Init? %w", ctx.Err())
	}
}

// warmWorld connects the communicator of every rank: an Allreduce of one
// byte of the engine's own memory (the connection buffers' byte for this
// rank, which no message uses) on its stream, waited for until done or
// quit is closed. It runs on a goroutine of its own (conn.startWarm), while
// the communicator issues nothing on that channel, and touches nothing
// else of the engine: its own op list, that communicator and its stream.
//
// worldWarmer is called with the communicator's mutex held: it takes what
// warmWorld needs then, so that the goroutine reads nothing the engine
// may change (detach).
func (d *device) worldWarmer() func(quit <-chan struct{}) error {
	ch := worldChan(d.size)
	comm, s := d.comms[ch], d.streams[ch]
	addr := d.warm.Ptr() + uintptr(1+d.rank)
	return func(quit <-chan struct{}) error {
		if comm == 0 {
			return backend.ErrClosed
		}
		return d.warmWorld(comm, s, addr, quit)
	}
}

func (d *device) warmWorld(comm uintptr, s *cuda.Stream, addr uintptr, quit <-chan struct{}) error {
	var ops cOps
	ops.addColl(comm, s.Handle(), backend.Allreduce, addr, addr, 1, ncclUint8, ncclOps[backend.Sum], 0)
	inProgress, _, err := d.lib.group(d.hooks, ops, false)
	for delay := time.Microsecond; err == nil; delay = min(2*delay, time.Millisecond) {
		if inProgress { // a non-blocking communicator: on the stream once NCCL says so
			inProgress, err = d.lib.asyncState(comm)
		} else {
			var done bool
			if done, err = s.Query(); done {
				return err
			}
		}
		select {
		case <-quit:
			return backend.ErrClosed
		case <-time.After(delay):
		}
	}
	return err
}
