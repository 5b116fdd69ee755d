package mp

import "github.com/courier-mp/courier/backend"

// The point-to-point calls with their spans on the timeline: what Send,
// Recv, Isend, Irecv and Sendrecv do once their one test of traceOn has
// found a communicator of the process recording one (trace.go), so that
// their own code, which runs when none does, is what it is without the
// timeline. Each does what its call does (the same steps, in p2p.go),
// between the span's post and its end; c need not record one itself.

// tracedSend is Send of b, called at pc.
func (c *Comm) tracedSend(b backend.Buffer, dest, tag int, pc uintptr) error {
	span := c.tracePost(tkSend, b, dest, tag, pc)
	r, err := c.start(opSend, b, dest, tag, pc)
	if err == nil {
		_, err = c.wait(r)
		r.Release()
	}
	return c.traceEnd(span, c.opErr("send", dest, tag, err))
}

// tracedRecv is Recv into b, called at pc.
func (c *Comm) tracedRecv(b backend.Buffer, source, tag int, pc uintptr) (Status, error) {
	span := c.tracePost(tkRecv, b, source, tag, pc)
	var st Status
	r, err := c.start(opRecv, b, source, tag, pc)
	if err == nil {
		st, err = c.wait(r)
		r.Release()
	}
	err = c.opErr("recv", source, tag, err)
	if span != 0 {
		c.traceDone(span, st, err)
	}
	return st, err
}

// tracedIsend is Isend of b, called at pc, with its buffer's guard g
// (COURIER_CHECK=2; nil: none).
func (c *Comm) tracedIsend(b backend.Buffer, dest, tag int, pc uintptr, g *bufGuard) *Request {
	span := c.tracePost(tkIsend, b, dest, tag, pc)
	r, err := c.start(opSend, b, dest, tag, pc)
	q := c.request(opSend, dest, tag, r, err)
	q.guard = g
	if span != 0 {
		c.traceRequest(q, span)
	}
	return q
}

// tracedIrecv is Irecv into b, called at pc.
func (c *Comm) tracedIrecv(b backend.Buffer, source, tag int, pc uintptr) *Request {
	span := c.tracePost(tkIrecv, b, source, tag, pc)
	r, err := c.start(opRecv, b, source, tag, pc)
	q := c.request(opRecv, source, tag, r, err)
	if span != 0 {
		c.traceRequest(q, span)
	}
	return q
}

// tracedSendrecv is Sendrecv, called at pc.
func (c *Comm) tracedSendrecv(send backend.Buffer, dest, sendTag int, recv backend.Buffer, source, recvTag int, pc uintptr) (Status, error) {
	span := c.traceSendrecv(send, dest, sendTag, recv, source, recvTag, pc)
	st, err := c.sendrecv(send, dest, sendTag, recv, source, recvTag, pc)
	if span != 0 {
		c.traceDone(span, st, err)
	}
	return st, err
}
