package nccl

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// initComms creates the NCCL communicator of every channel: for each
// other rank p, the channel from this rank to p (this rank is its NCCL
// rank 0, with the ID this rank made) and the one from p (NCCL rank 1,
// with p's ID). They start at once: blocking ones each on a goroutine
// (initBlocking), non-blocking ones polled until ready. If ctx ends first
// (a rank never came, or failed on its way), the caller aborts them.
func initComms(ctx context.Context, d *device, rank, size int, hellos []hello) error {
	if d.blocking {
		return initBlocking(ctx, d, rank, size, hellos)
	}
	for _, c := range channelSpecs(rank, size, hellos, d.skip) {
		comm, err := d.lib.initComm(d.hooks, c.nranks, c.nrank, c.id, false)
		d.comms[c.ch] = comm
		if err != nil {
			return fmt.Errorf("nccl: creating %s: %w", chanName(c.ch, size), err)
		}
	}
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		pending := 0
		for ch, comm := range d.comms {
			if comm == 0 {
				continue
			}
			inProgress, err := d.lib.asyncState(comm)
			if err != nil {
				return fmt.Errorf("nccl: creating %s: %w", chanName(ch, size), err)
			}
			if inProgress {
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nccl: ncclCommInitRankConfig (rank %d of %d on %v: %d of its channels not ready) did not finish: did every rank start, on its own GPU? %w",
				rank, size, d.dev, pending, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// initBlocking is initComms with blocking communicators
// (COURIER_NCCL_BLOCKING=1): each one's ncclCommInitRankConfig returns only
// when the peer has joined it, so each runs on a goroutine (and thread) of
// its own, all at once. If ctx ends first, Open fails and the calls still
// blocked are left to finish or not (a blocking init cannot be aborted).
func initBlocking(ctx context.Context, d *device, rank, size int, hellos []hello) error {
	type result struct {
		ch   int
		comm uintptr
		err  error
	}
	results := make(chan result, 2*size)
	specs := channelSpecs(rank, size, hellos, d.skip)
	for _, c := range specs {
		go func() {
			comm, err := d.lib.initComm(d.hooks, c.nranks, c.nrank, c.id, true)
			results <- result{c.ch, comm, err}
		}()
	}
	n := len(specs)
	var errs []error
	for range n {
		select {
		case r := <-results:
			d.comms[r.ch] = r.comm
			if r.err != nil {
				errs = append(errs, fmt.Errorf("nccl: creating %s: %w", chanName(r.ch, size), r.err))
			}
		case <-ctx.Done():
			return fmt.Errorf("nccl: ncclCommInitRankConfig (blocking, rank %d of %d on %v) did not finish: did every rank start, on its own GPU? %w",
				rank, size, d.dev, ctx.Err())
		}
	}
	return errors.Join(errs...)
}

// channelSpec is what creating one channel's communicator takes: the
// channel, its number of ranks and this rank's NCCL rank in it (on a
// channel, 0 on its sends to a rank, 1 on its receives from it), and the
// unique ID (the sender's; rank 0's for the communicator of every rank).
type channelSpec struct {
	ch, nranks, nrank int
	id                [idBytes]byte
}

// channelSpecs lists this rank's channels, two per other rank but those
// of skip (the IPC path's), and the communicator of every rank if rank 0
// made its ID and no pair is skipped.
func channelSpecs(rank, size int, hellos []hello, skip []bool) []channelSpec {
	var out []channelSpec
	for p := range size {
		if p != rank && (skip == nil || !skip[p]) {
			out = append(out,
				channelSpec{sendChan(p), 2, 0, hellos[rank].ids[p]},
				channelSpec{recvChan(p), 2, 1, hellos[p].ids[rank]})
		}
	}
	if id := hellos[0].ids[0]; size > 1 && id != [idBytes]byte{} && !sharesGPU(hellos) {
		out = append(out, channelSpec{worldChan(size), size, rank, id})
	}
	return out
}
