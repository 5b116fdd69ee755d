package mp

import (
	"errors"
	"fmt"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// The GPU side of the API. Device buffers (cuda.Slice) go wherever host
// slices go; what follows is what only GPU code needs: which GPU a rank
// uses, a CUDA stream that waits for a message on the GPU, and messages
// ordered on a stream.

// The transports' GPU capabilities are backend's: DeviceConn,
// StreamWaiter and StreamConn (a *cuda.Stream is a backend.Stream).

// Device returns the GPU this rank uses: on the nccl backend, the one its
// communicator is on; otherwise the one the nccl backend would choose
// ($COURIER_DEVICE, else the local rank modulo the GPU count). Allocate
// device buffers there (cuda.Alloc). The error matches ErrNotSupported
// when CUDA or a GPU is missing, and ErrInvalid when the choice is not a
// GPU of this host.
func (c *Comm) Device() (cuda.Device, error) {
	if c == nil {
		return 0, invalidf("nil *Comm")
	}
	if d, ok := c.conn.(backend.DeviceConn); ok {
		return cuda.Device(d.Device()), nil
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: this host has no GPU", ErrNotSupported)
	}
	d, err := backend.PickDevice(backend.Config{Job: c.job, Env: c.env}, n)
	if err != nil {
		return 0, err
	}
	return cuda.Device(d), nil
}

// WaitOn makes the CUDA stream s wait for the operation: work queued on s
// after WaitOn runs after the message has left the send buffer (which it
// may then overwrite) or has arrived in the receive buffer (which it may
// then read). The CPU does not wait for the transfer where the backend can
// make the GPU wait (nccl, device buffers); elsewhere (tcp; a receive into
// host memory; a message to this rank itself) WaitOn waits for the
// operation on the CPU, so one program runs on either backend.
//
// WaitOn does not collect the result: Wait (or Test, WaitAll, …) must still
// be called, and reports the operation's errors, including those the GPU
// cannot see (a mismatch found by COURIER_CHECK=1). It returns an error at
// once if the operation has already failed.
func (q *Request) WaitOn(s *cuda.Stream) error {
	if q == nil {
		return &OpError{Op: "waiton", Rank: -1, Peer: -1, Tag: -1, Err: invalidf("nil *Request")}
	}
	if s == nil || s.Handle() == 0 {
		return q.c.opErr("waiton", q.peer, q.tag, invalidf("nil or destroyed stream"))
	}
	r := q.acquire()
	if r == nil { // completed
		q.mu.Lock()
		err := q.err
		q.mu.Unlock()
		return err
	}
	if w, ok := r.(backend.StreamWaiter); ok {
		err := w.WaitOn(s)
		q.settle(false, Status{}, nil)
		if err == nil || !errors.Is(err, ErrNotSupported) {
			return q.c.opErr("waiton", q.peer, q.tag, err)
		}
		r = q.acquire()
		if r == nil {
			return nil
		}
	}
	// No GPU-side wait: complete it on the CPU. Its result stays for Wait.
	st, err := q.c.wait(r)
	q.settle(true, st, err)
	q.mu.Lock()
	err = q.err
	q.mu.Unlock()
	return err
}

// IsendOnStream sends buf, a device buffer, ordered on the CUDA stream s,
// as if the transfer were a kernel queued on s: it starts after the work
// queued on s before the call, and the work queued on s after the call
// starts once buf may be overwritten. The CPU does not wait for the
// transfer (on the nccl backend; on tcp the call synchronizes s, sends, and
// returns when the send is done). The request must still be waited for
// (Wait, Test, …) to collect errors; it may complete on the CPU later than
// on the GPU.
//
//go:noinline
func IsendOnStream[B DeviceBuffer](c *Comm, buf B, dest, tag int, s *cuda.Stream) *Request {
	b, pc := describe(buf), callerPC()
	if traceOn.Load() {
		return c.tracedOnStream(tkIsendOnStream, b, dest, tag, s, pc)
	}
	return c.onStream(opSend, b, dest, tag, s, pc, 0)
}

// IrecvOnStream receives into buf, a device buffer, ordered on the CUDA
// stream s: the receive starts after the work queued on s before the call,
// and the work queued on s after the call sees the message in buf. As
// IsendOnStream, the CPU does not wait, and the request must still be
// waited for; with COURIER_CHECK=1 the call waits until the sender has
// posted the message (its envelope is compared first).
//
//go:noinline
func IrecvOnStream[B DeviceBuffer](c *Comm, buf B, source, tag int, s *cuda.Stream) *Request {
	b, pc := describe(buf), callerPC()
	if traceOn.Load() {
		return c.tracedOnStream(tkIrecvOnStream, b, source, tag, s, pc)
	}
	return c.onStream(opRecv, b, source, tag, s, pc, 0)
}

// tracedOnStream is onStream with its span on the timeline (when c
// records one), on the track of s.
func (c *Comm) tracedOnStream(kind traceKind, b backend.Buffer, peer, tag int, s *cuda.Stream, pc uintptr) *Request {
	op := opSend
	if kind == tkIrecvOnStream {
		op = opRecv
	}
	span := c.tracePost(kind, b, peer, tag, pc)
	live := span != 0 && s != nil && s.Handle() != 0
	if live {
		c.traceOnStream(span, s.Handle())
		c.traceStreamStart(span, s)
	}
	q := c.onStream(op, b, peer, tag, s, pc, span)
	if live {
		c.traceStreamEnd(span)
	}
	if span != 0 && q.tseq == 0 {
		c.traceRequest(q, span)
	}
	return q
}

// onStream implements IsendOnStream and IrecvOnStream; span is the
// operation's on the timeline (0: none), which its request's completion
// ends.
func (c *Comm) onStream(op opKind, b backend.Buffer, peer, tag int, s *cuda.Stream, pc uintptr, span uint64) *Request {
	if err := c.checkPeer(peer, tag, op == opRecv); err != nil {
		return c.request(op, peer, tag, nil, err)
	}
	if op == opRecv && (peer == AnySource || tag == AnyTag) {
		return c.request(op, peer, tag, nil, fmt.Errorf("%w: a stream-ordered receive must name its source and tag", ErrNotSupported))
	}
	if s == nil || s.Handle() == 0 {
		return c.request(op, peer, tag, nil, invalidf("nil or destroyed stream"))
	}
	if sc, ok := c.conn.(backend.StreamConn); ok {
		var r backend.Request
		var err error
		if op == opRecv {
			r, err = sc.IrecvOn(b, peer, tag, pc, s)
		} else {
			r, err = sc.IsendOn(b, peer, tag, pc, s)
		}
		return c.request(op, peer, tag, r, err)
	}
	// The transport moves device memory through the host: order by
	// waiting for s, then for the message.
	if err := s.Synchronize(); err != nil {
		return c.request(op, peer, tag, nil, err)
	}
	r, err := c.start(op, b, peer, tag, pc)
	q := c.request(op, peer, tag, r, err)
	if err == nil {
		q.tseq = span
		q.Wait()
	}
	return q
}
