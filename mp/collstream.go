package mp

import (
	"errors"
	"fmt"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// Stream-ordered collectives: the non-blocking collectives ordered on a
// CUDA stream, as IsendOnStream is Isend ordered on one. IallreduceOnStream's
// doc says what they share. Why a *Request and not only an error: NCCL
// reports a failure (a peer lost, the communicator aborted) after the call,
// on the CPU, and the request is where it arrives, as for IsendOnStream;
// why the I: the call returns before the collective is done, as every call
// of the package that returns a request does.

// IbcastOnStream starts a Bcast of root's buf to every other rank's buf,
// ordered on stream s as IallreduceOnStream is.
//
//go:noinline
func IbcastOnStream[B DeviceBuffer](c *Comm, buf B, root int, s *cuda.Stream) (*Request, error) {
	b := describe(buf)
	return c.collOnStream(backend.Coll{Kind: backend.Bcast, Send: b, Recv: b, Root: root, Caller: callerPC()}, s)
}

// IreduceOnStream starts a Reduce of every rank's send with op into recv
// at root, ordered on stream s as IallreduceOnStream is.
//
//go:noinline
func IreduceOnStream[B DeviceBuffer](c *Comm, send, recv B, op Op, root int, s *cuda.Stream) (*Request, error) {
	return c.collOnStream(backend.Coll{Kind: backend.Reduce, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Root: root, Caller: callerPC()}, s)
}

// IallreduceOnStream starts an Allreduce of every rank's send with op into
// every rank's recv (recv may be send itself), ordered on the CUDA stream
// s as if it were a kernel queued there: on the GPU it starts after the
// work queued on s before the call, and the work queued on s after the
// call starts once this rank's part is done (recv holds the sum, send may
// be overwritten). That is a training step's pattern, with no CPU wait
// between its three parts:
//
//	backward(grads, s)                                          // a kernel on s
//	req, err := mp.IallreduceOnStream(comm, grads, grads, mp.Sum, s)
//	optimizer(params, grads, s)                                 // runs after the sum
//	…
//	_, err = req.Wait()                                         // later: its errors
//
// IbcastOnStream, IreduceOnStream, IallgatherOnStream,
// IreduceScatterOnStream and IalltoallOnStream order the other
// collectives alike. They take device buffers (DeviceBuffer) on the GPU of
// s, and the other arguments of their non-blocking forms (Iallreduce, …);
// every rank calls the collectives, of every form, in the same order. They
// return a *Request at once, or an argument error with a nil *Request
// (ErrInvalid: a nil or destroyed stream, a stream on another GPU than the
// buffers or the communicator, and what the blocking forms refuse). The
// request must still be completed (Wait, Test, WaitAll, …): it reports the
// collective's errors, and completes on the CPU once the collective has
// completed on the GPU. Until then the buffers belong to the library and
// to the work queued on s after the call. On nccl, WaitOn of the request
// makes another stream wait for the collective too.
//
// What waits. On nccl, NCCL runs the collective on the communicator of
// every rank, its stream waiting on the GPU for an event recorded on s,
// and s then waits on the GPU for the collective: the CPU waits neither
// for s nor for the collective. It does wait, before the collective is
// queued, for the non-blocking collectives started before it (they run on
// the CPU, in order), with COURIER_CHECK=1 for every rank to call it (the
// ranks compare each collective first, as for every form), and in a
// program's first collective for NCCL to connect the ranks. On one rank
// the result is a copy queued on s. Everywhere else (the host and tcp
// backends, and on nccl what NCCL lacks: int16 and uint16, products of
// complex numbers) the call synchronizes s, runs the
// collective as the blocking form does (device buffers staged through host
// memory) and returns a completed request: the same results in the same
// order on s, one program on every backend, the CPU waiting.
//
//go:noinline
func IallreduceOnStream[B DeviceBuffer](c *Comm, send, recv B, op Op, s *cuda.Stream) (*Request, error) {
	return c.collOnStream(backend.Coll{Kind: backend.Allreduce, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Caller: callerPC()}, s)
}

// IallgatherOnStream starts an Allgather of every rank's send into every
// rank's recv, rank k's at block k, ordered on stream s as
// IallreduceOnStream is.
//
//go:noinline
func IallgatherOnStream[B DeviceBuffer](c *Comm, send, recv B, s *cuda.Stream) (*Request, error) {
	return c.collOnStream(backend.Coll{Kind: backend.Allgather, Send: describe(send), Recv: describe(recv), Caller: callerPC()}, s)
}

// IreduceScatterOnStream starts a ReduceScatter (every rank's send
// combined with op, block k of the result into rank k's recv), ordered on
// stream s as IallreduceOnStream is.
//
//go:noinline
func IreduceScatterOnStream[B DeviceBuffer](c *Comm, send, recv B, op Op, s *cuda.Stream) (*Request, error) {
	return c.collOnStream(backend.Coll{Kind: backend.ReduceScatter, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Caller: callerPC()}, s)
}

// IalltoallOnStream starts an Alltoall (block k of send to rank k, rank
// j's block into block j of recv), ordered on stream s as
// IallreduceOnStream is.
//
//go:noinline
func IalltoallOnStream[B DeviceBuffer](c *Comm, send, recv B, s *cuda.Stream) (*Request, error) {
	return c.collOnStream(backend.Coll{Kind: backend.Alltoall, Send: describe(send), Recv: describe(recv), Caller: callerPC()}, s)
}

// onStreamName is the operation name of the errors of kind k's
// stream-ordered form ("iallreduceonstream").
func onStreamName(k backend.CollKind) string { return icollName(k) + "onstream" }

// collOnStream validates a stream-ordered collective and starts it in its
// turn.
func (c *Comm) collOnStream(co backend.Coll, s *cuda.Stream) (*Request, error) {
	name := onStreamName(co.Kind)
	peer := -1
	if co.Kind.Rooted() {
		peer = co.Root
	}
	if err := c.checkColl(&co); err != nil {
		return nil, c.opErr(name, peer, -1, err)
	}
	if err := c.checkStream(co, s); err != nil {
		return nil, c.opErr(name, peer, -1, err)
	}
	call := uint32(co.Kind) | collNonblocking | collOnStream
	var span uint64
	if traceOn.Load() {
		if span = c.traceColl(call, &co); span != 0 {
			c.traceOnStream(span, s.Handle())
		}
	}
	c.collLock(co.Caller, call, span)
	if span != 0 {
		c.traceStreamStart(span, s) // in its turn: the GPU span begins where the collective is queued
	}
	r, err := c.runOnStream(co, s)
	if span != 0 {
		c.traceStreamEnd(span)
	}
	c.collUnlock()
	q := &Request{c: c, op: name, peer: peer, tag: -1, coll: true, r: r}
	switch {
	case err != nil:
		q.fail(err)
	case r == nil:
		q.done = true // it ran on the CPU, or on s as a copy
	}
	if span != 0 {
		c.traceRequest(q, span)
	}
	return q, nil
}

// checkStream validates the stream of a stream-ordered collective: live,
// and on the GPU of the buffers and of the communicator.
func (c *Comm) checkStream(co backend.Coll, s *cuda.Stream) error {
	if s == nil || s.Handle() == 0 {
		return invalidf("nil or destroyed stream")
	}
	dev := int(s.Device())
	for _, b := range []backend.Buffer{co.Send, co.Recv} {
		if b.Count > 0 && b.Device != dev {
			return invalidf("the buffers are on cuda:%d, the stream on cuda:%d", b.Device, dev)
		}
	}
	if d, ok := c.conn.(backend.DeviceConn); ok && d.Device() != dev {
		return invalidf("the stream is on cuda:%d, this rank's communicator on cuda:%d", dev, d.Device())
	}
	return nil
}

// runOnStream runs a validated collective in its turn, ordered on s: it
// returns the transport's request where the transport orders it on s,
// and nil where it is done (or queued on s as a copy).
func (c *Comm) runOnStream(co backend.Coll, s *cuda.Stream) (backend.Request, error) {
	if c.size == 1 {
		return nil, copyOnStream(co.Recv, co.Send, s)
	}
	if c.check {
		if err := c.agree(co); err != nil {
			return nil, err
		}
	}
	if co.Send.Count == 0 && co.Recv.Count == 0 {
		return nil, nil // nothing moves: every rank passes empty buffers
	}
	if sc, ok := c.conn.(backend.StreamCollectives); ok {
		r, err := sc.CollectiveOn(co, s)
		if err == nil || !errors.Is(err, backend.ErrSkip) {
			return r, err
		}
	}
	// Not on the GPU: order it by waiting for s, and run it.
	if err := s.Synchronize(); err != nil {
		return nil, fmt.Errorf("synchronizing the stream: %w", err)
	}
	return nil, c.runAgreed(co)
}

// copyOnStream queues on s a copy of src into dst (one rank's collective
// of device buffers), unless they are the same memory or empty.
func copyOnStream(dst, src backend.Buffer, s *cuda.Stream) error {
	n := min(dst.Len(), src.Len())
	if n == 0 || dst.Ptr == src.Ptr {
		return nil
	}
	d := cuda.ByteView(uintptr(dst.Ptr), n, cuda.Device(dst.Device))
	return cuda.CopyDeviceAsync(d, cuda.ByteView(uintptr(src.Ptr), n, cuda.Device(src.Device)), s)
}
