package mp

import (
	"errors"

	"github.com/courier-mp/courier/backend"
)

// Send sends buf to rank dest with tag and returns when buf may be reused.
// It blocks the calling goroutine (not the process), at most until the
// communicator's timeout. Sending to one's own rank works; the matching
// Recv may be posted before or after.
//
// On the TCP backend a small message is buffered by the receiver and Send
// returns once it is written; a large one waits for the matching receive.
// Code that relies on Send returning before the receive is posted is not
// valid MPI: use Isend for that.
//
//go:noinline
func Send[B Buffer](c *Comm, buf B, dest, tag int) error {
	if traceOn.Load() {
		return c.tracedSend(describe(buf), dest, tag, callerPC())
	}
	b, pc := describe(buf), callerPC()
	if err := c.checkPeer(dest, tag, false); err != nil {
		return c.opErr("send", dest, tag, err)
	}
	if c.sender != nil {
		// A message the transport takes whole goes in one call, with no
		// request to wait for and release.
		if handled, err := c.sender.Send(b, dest, tag, pc); handled {
			return c.opErr("send", dest, tag, err)
		}
	}
	r, err := c.conn.Isend(b, dest, tag, pc)
	if err == nil {
		_, err = c.wait(r)
		r.Release()
	}
	return c.opErr("send", dest, tag, err)
}

// senderOf is conn's backend.Sender, or nil.
func senderOf(conn backend.Conn) backend.Sender {
	s, _ := conn.(backend.Sender)
	return s
}

// Recv receives a message from rank source (or AnySource) with tag (or
// AnyTag) into buf, and returns when buf holds it. A message larger than
// buf is an error matching ErrTruncate. Status says who sent it, with which
// tag, and how many elements it filled.
//
//go:noinline
func Recv[B Buffer](c *Comm, buf B, source, tag int) (Status, error) {
	if traceOn.Load() {
		return c.tracedRecv(describe(buf), source, tag, callerPC())
	}
	r, err := c.start(opRecv, describe(buf), source, tag, callerPC())
	if err != nil {
		return Status{}, c.opErr("recv", source, tag, err)
	}
	st, err := c.wait(r)
	r.Release()
	return st, c.opErr("recv", source, tag, err)
}

// Isend starts sending buf to rank dest with tag and returns at once. buf
// must not be modified until the request completes (Wait, Test, WaitAll,
// …). An error (a bad rank, a closed communicator) is reported by the
// request, never lost.
//
//go:noinline
func Isend[B Buffer](c *Comm, buf B, dest, tag int) *Request {
	b, pc := describe(buf), callerPC()
	var g *bufGuard
	if c != nil && c.guard {
		g = newGuard(b, pc)
	}
	if traceOn.Load() {
		return c.tracedIsend(b, dest, tag, pc, g)
	}
	r, err := c.start(opSend, b, dest, tag, pc)
	q := c.request(opSend, dest, tag, r, err)
	q.guard = g
	return q
}

// Irecv starts receiving into buf from rank source (or AnySource) with tag
// (or AnyTag) and returns at once. buf must not be read or modified until
// the request completes.
//
//go:noinline
func Irecv[B Buffer](c *Comm, buf B, source, tag int) *Request {
	if traceOn.Load() {
		return c.tracedIrecv(describe(buf), source, tag, callerPC())
	}
	r, err := c.start(opRecv, describe(buf), source, tag, callerPC())
	return c.request(opRecv, source, tag, r, err)
}

type opKind bool

const (
	opSend opKind = false
	opRecv opKind = true
)

func (o opKind) String() string {
	if o == opRecv {
		return "recv"
	}
	return "send"
}

// start validates a message call and hands it to the transport.
func (c *Comm) start(op opKind, b backend.Buffer, peer, tag int, pc uintptr) (backend.Request, error) {
	if err := c.checkPeer(peer, tag, op == opRecv); err != nil {
		return nil, err
	}
	if op == opRecv {
		return c.conn.Irecv(b, peer, tag, pc)
	}
	return c.conn.Isend(b, peer, tag, pc)
}

// request wraps what start returned for the caller of Isend or Irecv.
func (c *Comm) request(op opKind, peer, tag int, r backend.Request, err error) *Request {
	req := &Request{c: c, op: op.String(), peer: peer, tag: tag, r: r}
	if err != nil {
		req.fail(err)
	}
	return req
}

// Sendrecv sends send to dest and receives recv from source at the same
// time, and returns when both are done: the exchange of a ring shift or a
// halo swap, which never deadlocks however the peers order their calls.
// The status is the receive's.
//
//go:noinline
func Sendrecv[S, R Buffer](c *Comm, send S, dest, sendTag int, recv R, source, recvTag int) (Status, error) {
	if traceOn.Load() {
		return c.tracedSendrecv(describe(send), dest, sendTag, describe(recv), source, recvTag, callerPC())
	}
	return c.sendrecv(describe(send), dest, sendTag, describe(recv), source, recvTag, callerPC())
}

// sendrecv is Sendrecv's work.
func (c *Comm) sendrecv(send backend.Buffer, dest, sendTag int, recv backend.Buffer, source, recvTag int, pc uintptr) (Status, error) {
	if err := c.checkPeer(dest, sendTag, false); err != nil {
		return Status{}, c.opErr("send", dest, sendTag, err)
	}
	rr, err := c.start(opRecv, recv, source, recvTag, pc)
	if err != nil {
		return Status{}, c.opErr("recv", source, recvTag, err)
	}
	sr, serr := c.conn.Isend(send, dest, sendTag, pc)
	if serr == nil {
		_, serr = c.wait(sr)
		sr.Release()
	}
	st, rerr := c.wait(rr)
	rr.Release()
	return st, errors.Join(c.opErr("send", dest, sendTag, serr), c.opErr("recv", source, recvTag, rerr))
}

// checkPeer validates a rank and tag before they reach the transport.
func (c *Comm) checkPeer(peer, tag int, recv bool) error {
	if c == nil {
		return invalidf("nil *Comm")
	}
	if peer < 0 || peer >= c.size {
		if !(recv && peer == AnySource) {
			return invalidf("rank %d is not in [0, %d)", peer, c.size)
		}
	}
	if (tag < 0 && !(recv && tag == AnyTag)) || tag > MaxTag {
		return invalidf("tag %d: tags are in [0, %d]", tag, MaxTag)
	}
	return nil
}
