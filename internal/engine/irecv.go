package engine

import (
	"fmt"
	"slices"

	"github.com/courier-mp/courier/backend"
)

// Irecv implements backend.Conn: it takes the oldest matching unexpected
// message, or posts the receive for the next matching arrival.
func (c *Comm) Irecv(buf backend.Buffer, source, tag int, caller uintptr) (backend.Request, error) {
	e := c.e
	if source != backend.AnySource && (source < 0 || source >= c.size) {
		return nil, fmt.Errorf("%w: rank %d is not in [0, %d)", backend.ErrInvalid, source, c.size)
	}
	if err := c.revokedFor(tag); err != nil {
		return nil, err
	}
	if buf.Mem == backend.Device {
		host := make([]byte, buf.Len())
		r, err := c.Irecv(hostBuffer(host, buf), source, tag, caller)
		if err != nil {
			return nil, err
		}
		return &stagedRecv{Request: r, dev: buf, host: host}, nil
	}
	r := newRequest(c, reqRecv, buf, source, tag, caller)
	var p *Peer
	if source >= 0 {
		p = c.peer(source)
	}
	e.mu.Lock()
	i := c.findUnexpected(source, tag)
	if i < 0 {
		usable := c.usable(p, source)
		if source == backend.AnySource {
			usable = c.wildUsable()
		}
		if usable == nil && c.refuses(tag) {
			usable = c.revoked
		}
		if err := usable; err != nil {
			e.mu.Unlock()
			r.Release()
			return nil, err
		}
		c.posted = append(c.posted, r)
		e.mu.Unlock()
		return r, nil
	}
	m := c.unexpected[i]
	c.unexpected = slices.Delete(c.unexpected, i, i+1)
	switch {
	case m.kind == KindRTS:
		e.acceptRTS(r, &m.envelope, m.sid, m.addr, m.pull, false) // unlocks
		freeMessage(m)
	case m.ready:
		e.mu.Unlock()
		e.deliver(r, &m.envelope, m.data)
		putBuf(m.data)
		freeMessage(m)
	default:
		// The payload is still being read; the reader delivers it.
		m.recv = r
		e.mu.Unlock()
	}
	return r, nil
}
