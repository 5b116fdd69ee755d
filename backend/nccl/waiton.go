package nccl

import (
	"fmt"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// waitOnBound bounds how long WaitOn blocks the CPU for a request's group
// to reach the stream (normally microseconds; longer only while NCCL sets
// up a connection).
const waitOnBound = time.Minute

// WaitOn makes stream s wait, on the GPU, until request r (an Isend or
// Irecv of a communicator of this backend) has completed on the
// communicator's stream: work queued on s after WaitOn runs after the
// transfer, and the CPU does not wait for it. This is how a compute stream
// consumes a message without a CPU round trip (mp wraps it as
// Request.WaitOn).
//
// WaitOn issues r (with everything queued before it) if it was still
// queued, and blocks the CPU only until NCCL has the group on its stream.
// With checks on, a receive is issued only once it has matched a message
// its sender announced, so WaitOn blocks until the sender has posted it;
// and a receive that matched a message taken off the wire early is
// complete only once the CPU has copied it, so WaitOn blocks for that
// (bounded; an error matching backend.ErrTimeout after a minute).
// It does not complete r: Wait or Test still must, and they report errors
// (such as a mismatch found by the checks, which a GPU-side wait cannot
// see). It returns r's error at once if r has already failed, and nil if r
// has already succeeded.
//
// A receive into host memory is complete only once the CPU has copied it
// out of staging memory, at Wait or Test, and a message to this rank itself
// is copied by the CPU: for these WaitOn returns an error matching
// backend.ErrNotSupported.
func WaitOn(r backend.Request, s *cuda.Stream) error {
	q, ok := r.(*request)
	if !ok || q == nil || q.c == nil {
		return fmt.Errorf("%w: WaitOn: %T is not a pending request of the nccl backend", backend.ErrInvalid, r)
	}
	if s.Handle() == 0 {
		return fmt.Errorf("%w: WaitOn: nil or destroyed stream", backend.ErrInvalid)
	}
	return q.c.waitOn(q, s)
}

// waitOn implements WaitOn.
func (c *conn) waitOn(r *request, s *cuda.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline := time.Now().Add(waitOnBound)
	for {
		if r.stage == stageDone {
			return r.err
		}
		if r.stage == stageIPC {
			return c.ipcWaitOnLocked(r, s)
		}
		if r.stage == stageLocal {
			return fmt.Errorf("%w: WaitOn: a message between a rank and itself is copied by the CPU; Wait for it", backend.ErrNotSupported)
		}
		if r.recv && r.buf.Mem == backend.Host || r.coll != 0 && r.recvBuf.Mem == backend.Host && r.recvBuf.Count > 0 {
			return fmt.Errorf("%w: WaitOn: a receive into host memory is ready only when Wait or Test reports it (the CPU copies it out of staging memory); receive into device memory to wait on the GPU",
				backend.ErrNotSupported)
		}
		if r.stage == stageQueued {
			c.issueLocked()
		}
		// A receive that took a message received early completes when the
		// CPU has copied it (below, by progressLocked): nothing to queue.
		if r.stage == stageIssued && r.early == nil {
			g := c.groupOfLocked(r)
			if g == nil {
				return fmt.Errorf("nccl: internal error: an issued request in no group")
			}
			if g.sealed {
				return c.eng.waitOn(g, s)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: WaitOn: the request did not reach the GPU within %v", backend.ErrTimeout, waitOnBound)
		}
		c.mu.Unlock()
		time.Sleep(10 * time.Microsecond)
		c.mu.Lock()
		c.progressLocked()
	}
}

// groupOfLocked returns the group in flight that holds r's operation.
func (c *conn) groupOfLocked(r *request) *group {
	for _, g := range c.chans[chanOf(r)].inflight {
		for i := range g.ops {
			if g.ops[i].r == r {
				return g
			}
		}
	}
	return nil
}

// The GPU capabilities of the contract.
var (
	_ backend.StreamWaiter      = (*request)(nil)
	_ backend.StreamConn        = (*conn)(nil)
	_ backend.StreamCollectives = (*conn)(nil)
	_ backend.DeviceConn        = (*conn)(nil)
)

// WaitOn implements backend.StreamWaiter (mp's Request.WaitOn); see the
// package function WaitOn.
func (r *request) WaitOn(s backend.Stream) error {
	cs, err := cudaStream(s)
	if err != nil {
		return err
	}
	return WaitOn(r, cs)
}

// cudaStream is the *cuda.Stream package mp passes as a backend.Stream.
func cudaStream(s backend.Stream) (*cuda.Stream, error) {
	cs, ok := s.(*cuda.Stream)
	if !ok {
		return nil, fmt.Errorf("%w: the nccl backend takes a *cuda.Stream, not %T", backend.ErrInvalid, s)
	}
	return cs, nil
}

// IsendOn and IrecvOn implement backend.StreamConn: they post a send or
// receive ordered on the caller's CUDA stream s (a *cuda.Stream), as if
// NCCL ran it on s (mp's IsendOnStream and IrecvOnStream):
// it starts on the GPU after the work queued on s before the call, and
// work queued on s after the call starts after it has completed. The CPU
// does not wait for the transfer: the call returns once NCCL has the
// operation on the GPU (with checks on, a receive also waits for its
// sender to post the message). The request still reports completion and
// errors through Wait and Test.
//
// The buffer must be device memory: a host buffer is staged by the CPU,
// which a stream cannot wait for (backend.ErrInvalid). A message between a
// rank and itself is copied by the CPU: s is synchronized first, and the
// request has completed when the call returns.
func (c *conn) IsendOn(buf backend.Buffer, dest, tag int, caller uintptr, s backend.Stream) (backend.Request, error) {
	cs, err := cudaStream(s)
	if err != nil {
		return nil, err
	}
	return c.postOn(false, buf, dest, tag, caller, cs)
}

// IrecvOn: see IsendOn.
func (c *conn) IrecvOn(buf backend.Buffer, source, tag int, caller uintptr, s backend.Stream) (backend.Request, error) {
	cs, err := cudaStream(s)
	if err != nil {
		return nil, err
	}
	return c.postOn(true, buf, source, tag, caller, cs)
}

func (c *conn) postOn(recv bool, buf backend.Buffer, peer, tag int, caller uintptr, s *cuda.Stream) (backend.Request, error) {
	if s.Handle() == 0 {
		return nil, fmt.Errorf("%w: nil or destroyed stream", backend.ErrInvalid)
	}
	if buf.Mem != backend.Device && buf.Count > 0 {
		return nil, fmt.Errorf("%w: a stream-ordered operation needs a device buffer (host memory is staged by the CPU, which the stream cannot wait for)",
			backend.ErrInvalid)
	}
	if int(s.Device()) != c.dev {
		return nil, fmt.Errorf("%w: the stream is on cuda:%d, this rank's communicator on cuda:%d", backend.ErrInvalid, int(s.Device()), c.dev)
	}
	post := c.Isend
	if recv {
		post = c.Irecv
	}
	if peer == c.rank || tag < 0 {
		// Copied (or carried) by the CPU: order it by waiting for s.
		if err := s.Synchronize(); err != nil {
			return nil, fmt.Errorf("nccl: synchronizing the caller's stream: %w", err)
		}
		return post(buf, peer, tag, caller)
	}
	if peer < 0 || peer >= c.size {
		return post(buf, peer, tag, caller) // the error Isend/Irecv give
	}
	if c.ipcPeerOf(peer) != nil {
		return c.ipcPostOn(recv, buf, peer, tag, caller, s)
	}
	ch := sendChan(peer)
	if recv {
		ch = recvChan(peer)
	}
	c.mu.Lock()
	err := c.usableLocked(peer, recv)
	if err == nil {
		err = c.eng.follow(ch, s)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	r, err := post(buf, peer, tag, caller)
	if err != nil {
		return nil, err
	}
	return c.streamWaits(r, s)
}

// streamWaits makes s wait on the GPU for r, just posted, and returns r;
// an error when r is not on the GPU in time for the stream to wait for
// it (r then is not handed out).
func (c *conn) streamWaits(r backend.Request, s *cuda.Stream) (backend.Request, error) {
	q := r.(*request)
	if err := c.waitOn(q, s); err != nil && !q.done.Load() {
		return nil, err
	}
	return r, nil
}

// CollectiveOn implements backend.StreamCollectives: collective co ordered
// on the caller's CUDA stream s (a *cuda.Stream), as if NCCL ran it on s
// (mp's IallreduceOnStream and the other …OnStream collectives). The
// channel of every rank's stream waits, on the GPU, for an event recorded
// on s; the collective goes on that stream as Collective puts it there;
// and s waits for the group's seal (its completion word or event). So it
// starts after the work queued on s before the call, the work queued on s
// after the call starts after it, and the CPU waits for neither: the call
// returns once NCCL has the group on its stream (after the background
// connection of the communicator of every rank, in a program's first
// collective). The request still reports completion and errors through
// Wait and Test.
//
// The buffers must be device memory (host memory is staged by the CPU,
// which a stream cannot wait for) and s on this rank's GPU:
// backend.ErrInvalid otherwise. What Collective leaves to package mp is
// backend.ErrSkip here too.
func (c *conn) CollectiveOn(co backend.Coll, s backend.Stream) (backend.Request, error) {
	cs, err := cudaStream(s)
	if err != nil {
		return nil, err
	}
	if cs.Handle() == 0 {
		return nil, fmt.Errorf("%w: nil or destroyed stream", backend.ErrInvalid)
	}
	for _, b := range []backend.Buffer{co.Send, co.Recv} {
		if b.Mem != backend.Device && b.Count > 0 {
			return nil, fmt.Errorf("%w: a stream-ordered collective needs device buffers (host memory is staged by the CPU, which the stream cannot wait for)",
				backend.ErrInvalid)
		}
	}
	if int(cs.Device()) != c.dev {
		return nil, fmt.Errorf("%w: the stream is on cuda:%d, this rank's communicator on cuda:%d", backend.ErrInvalid, int(cs.Device()), c.dev)
	}
	if !c.runsColl(co) {
		return nil, backend.ErrSkip
	}
	if err := c.followWorld(cs); err != nil {
		return nil, err
	}
	r, err := c.Collective(co)
	if err != nil {
		return nil, err
	}
	return c.streamWaits(r, cs)
}

// followWorld makes the stream of the channel of every rank wait for the
// work queued on s so far (engine.follow). Nothing may be queued on that
// stream while the background connection runs on it (startWarm) or while
// a group of the channel is still being launched (a non-blocking
// communicator's ncclInProgress): it waits for both, on the CPU, bounded
// as waitOn is.
func (c *conn) followWorld(s *cuda.Stream) error {
	w := worldChan(c.size)
	deadline := time.Now().Add(waitOnBound)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		err := c.fatal
		if err == nil {
			err = c.chans[w].err
		}
		if err == nil {
			err = c.lostOfLocked(w)
		}
		if err != nil {
			return err
		}
		if !c.warming && !c.chans[w].launching() {
			return c.eng.follow(w, s)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the communicator of every rank was not ready for a stream-ordered collective within %v", backend.ErrTimeout, waitOnBound)
		}
		c.mu.Unlock()
		time.Sleep(10 * time.Microsecond)
		c.mu.Lock()
		c.progressLocked()
	}
}
