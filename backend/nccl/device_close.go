package nccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/cuda"
)

// detach implements engine.
func (d *device) detach(ch int) func() error {
	comm := d.comms[ch]
	if comm == 0 {
		return nil
	}
	d.comms[ch] = 0
	return func() error { return d.abortComm(comm) }
}

// abortComm calls ncclCommAbort on comm, on a goroutine of its own, and
// waits for it at most abortBound. If it has not returned by then, the
// engine is marked stuck (close leaves the memory the GPU may still use)
// and the error matches errAbortStuck; the call goes on in the background.
func (d *device) abortComm(comm uintptr) error {
	done := make(chan error, 1)
	go func() { done <- d.lib.abort(d.hooks, comm) }()
	t := time.NewTimer(abortBound)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		d.stuck.Store(true)
		return fmt.Errorf("%w (waited %v; the GPU may still use the communicator's buffers, which are left allocated)", errAbortStuck, abortBound)
	}
}

// joinAbort reports err, and the abort's error if it failed too.
func joinAbort(err, aerr error) error {
	if aerr != nil {
		return fmt.Errorf("%w (ncclCommAbort: %v)", err, aerr)
	}
	return err
}

// close implements engine: every channel left is aborted, in parallel
// (each abort is one C call on a thread of its own; they are independent
// communicators).
func (d *device) close() error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for ch, comm := range d.comms {
		if comm == 0 {
			continue
		}
		d.comms[ch] = 0
		wg.Go(func() {
			if err := d.abortComm(comm); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if d.stuck.Load() {
		// An abort has not returned: a kernel may still run and use the
		// streams and memory. Waiting for them could hang; freeing them
		// could corrupt what the kernel writes. Leave them.
		errs = append(errs, errors.New("nccl: an ncclCommAbort did not return: the communicator's streams and device memory were left as they are"))
		return errors.Join(errs...)
	}
	drained := true
	for i, s := range slices.Concat(d.streams, d.shared) {
		if s != nil {
			if err := d.drain(s); err != nil {
				what := "the stream shared with rank " + strconv.Itoa(i-len(d.streams))
				if i < len(d.streams) {
					what = "the stream of " + chanName(i, d.size)
				}
				errs = append(errs, fmt.Errorf("%s: %w", what, err))
				drained = false
				continue // a stream still busy is left, not destroyed
			}
			s.Destroy()
		}
	}
	if !drained {
		// Work left on a stream may still write the staging memory, the
		// connection buffers or a completion word: leave them all.
		errs = append(errs, errors.New("nccl: a channel's stream could not be drained: the communicator's device and page-locked memory were left allocated"))
		return errors.Join(errs...)
	}
	for _, e := range d.allEvents {
		e.Destroy()
	}
	for _, s := range d.allSlabs {
		s.dev.Free()
		s.host.Free()
	}
	for _, m := range d.allTemps {
		m.Free()
	}
	d.warm.Free()
	if !d.waitedOn {
		// A stream given to WaitOn may still be queued to read its word
		// (cuStreamWaitValue64 reads it when the stream gets there, which
		// may be after Close): then the words stay allocated, a few
		// hundred bytes per communicator.
		if d.flags != nil {
			d.flags.free()
		}
	} else if d.flags != nil {
		keptFlagWords.Add(1)
	}
	d.flags = nil
	d.events, d.allEvents, d.slabs, d.allSlabs, d.temps, d.allTemps = nil, nil, nil, nil, nil, nil
	return errors.Join(errs...)
}

// keptFlagWords counts the blocks of completion words that Close left
// allocated for a stream given to WaitOn (the leak check of the tests
// allows these, and no other page-locked memory).
var keptFlagWords atomic.Int64

// drain waits for stream s to finish its work, at most abortBound (after
// every channel was aborted, nothing on it should be waiting for a peer).
func (d *device) drain(s *cuda.Stream) error {
	ctx, cancel := context.WithTimeout(context.Background(), abortBound)
	defer cancel()
	err := waitStream(ctx, s)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		d.stuck.Store(true)
		return fmt.Errorf("nccl: a channel's stream was still busy %v after its communicator was aborted; it was left as it is", abortBound)
	case err != nil:
		return fmt.Errorf("nccl: waiting for a channel's stream after its abort: %w", err)
	}
	return nil
}
