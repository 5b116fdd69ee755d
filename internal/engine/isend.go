package engine

import (
	"fmt"

	"github.com/courier-mp/courier/backend"
)

// Isend implements backend.Conn: a message up to the link's eager limit
// goes whole and the send completes when the link has it; a larger one is
// announced (RTS) and completes when the receiver has taken it.
func (c *Comm) Isend(buf backend.Buffer, dest, tag int, caller uintptr) (backend.Request, error) {
	e := c.e
	if dest < 0 || dest >= c.size {
		return nil, fmt.Errorf("%w: rank %d is not in [0, %d)", backend.ErrInvalid, dest, c.size)
	}
	if err := c.revokedFor(tag); err != nil {
		return nil, err
	}
	if buf.Mem == backend.Device {
		staged, err := stageOut(buf)
		if err != nil {
			return nil, err
		}
		buf = staged
	}
	r := newRequest(c, reqSend, buf, dest, tag, caller)
	if dest == c.rank {
		if err := c.sendSelf(r); err != nil {
			return nil, err
		}
		return r, nil
	}
	p := c.peer(dest)
	if buf.Len() <= p.eager {
		if err := p.sendEager(c, buf, dest, tag); err != nil {
			r.Release()
			return nil, err
		}
		r.complete(r.sendStatus(), nil)
		return r, nil
	}
	e.mu.Lock()
	if err := c.usable(p, dest); err != nil || c.refuses(tag) {
		if err == nil {
			err = c.revoked
		}
		e.mu.Unlock()
		r.Release()
		return nil, err
	}
	r.id = e.register(r)
	e.mu.Unlock()
	if err := p.sendRTS(r); err != nil {
		e.mu.Lock()
		_, mine := e.inflight[r.id]
		delete(e.inflight, r.id)
		e.mu.Unlock()
		if !mine {
			// A failure sweep completed it already; the user gets it.
			return r, nil
		}
		r.Release()
		return nil, err
	}
	return r, nil
}

// Send implements backend.Sender: a message up to the peer's eager limit
// is written whole from the caller's goroutine, with no request (nothing
// of it is left to complete, report or release); others are left to
// Isend, as are device buffers and sends to this rank.
func (c *Comm) Send(buf backend.Buffer, dest, tag int, caller uintptr) (bool, error) {
	if dest < 0 || dest >= c.size || dest == c.rank || buf.Mem == backend.Device {
		return false, nil
	}
	p := c.peer(dest)
	if buf.Len() > p.eager {
		return false, nil
	}
	if err := c.revokedFor(tag); err != nil {
		return true, err
	}
	return true, p.sendEager(c, buf, dest, tag)
}

// sendStatus is a completed send's status: this rank, the tag, the count.
func (r *request) sendStatus() backend.Status {
	return backend.Status{Source: r.c.rank, Tag: r.tag, Count: r.buf.Count}
}

// sendSelf delivers a message to this rank: straight into a posted
// receive, or copied aside until one is posted. A send to oneself never
// waits for the receive, whatever its size.
func (c *Comm) sendSelf(r *request) error {
	e := c.e
	e.mu.Lock()
	if err := c.usable(nil, c.rank); err != nil || c.refuses(r.tag) {
		if err == nil {
			err = c.revoked
		}
		e.mu.Unlock()
		r.Release()
		return err
	}
	env := envelope{src: c.rank, tag: r.tag, typ: r.buf.Type, count: r.buf.Count}
	if q := c.takePosted(&env); q != nil {
		e.mu.Unlock()
		e.deliver(q, &env, r.buf.Bytes())
		r.complete(r.sendStatus(), nil)
		return nil
	}
	m := newMessage(message{envelope: env, kind: KindEager, ready: true})
	if n := r.buf.Len(); n > 0 {
		m.data = getBuf(int(n))
		copy(m.data, r.buf.Bytes())
	}
	c.unexpected = append(c.unexpected, m)
	e.mu.Unlock()
	r.complete(r.sendStatus(), nil)
	return nil
}

// sendEager writes a whole small message of c to its rank dest (p).
func (p *Peer) sendEager(c *Comm, buf backend.Buffer, dest, tag int) error {
	if err := c.downErr(p, dest); err != nil {
		return err
	}
	h := Header{Kind: KindEager, Type: buf.Type, Tag: int32(tag), Count: buf.Count, Comm: c.id}
	if err := p.link.Send(h, buf.Bytes()); err != nil {
		return c.peerErr(p, p.writeFailed(err))
	}
	return nil
}

// sendRTS announces a large message; a link that pulls gets its address.
func (p *Peer) sendRTS(r *request) error {
	if err := r.c.downErr(p, r.peer); err != nil {
		return err
	}
	h := Header{Kind: KindRTS, Type: r.buf.Type, Tag: int32(r.tag), Count: r.buf.Count, SID: r.id, Comm: r.c.id}
	if p.puller != nil {
		if addr, ok := p.puller.PullAddr(r.buf.Bytes(), r.tag); ok {
			h.Flags |= RTSPull
			h.Addr = addr
		}
	}
	if err := p.link.Send(h, nil); err != nil {
		return r.c.peerErr(p, p.writeFailed(err))
	}
	return nil
}

// SendData sends the DATA of a KindData job: the link's writer calls it
// with a function that writes one frame; chunk bounds each frame's
// payload. It returns the write error that broke the link, if any; the
// send's request is completed either way.
func (p *Peer) SendData(j Job, chunk int, write func(h *Header, payload []byte) error) error {
	data, ok := p.DataStart(j)
	if !ok {
		return nil
	}
	chunk = min(max(chunk, 1), MaxChunk)
	// The header lives in the request: a local would escape to the heap
	// through write.
	h := &j.send.hdr
	var err error
	if err = p.downErr(); err == nil {
		for off := 0; off < len(data); off += chunk {
			n := min(chunk, len(data)-off)
			*h = DataHeader(j, off, n)
			if err = write(h, data[off:off+n]); err != nil {
				err = p.lossError(err)
				break
			}
		}
	}
	p.DataEnd(j, err)
	return err
}

// DataStart begins a KindData job for a link that writes the chunks
// itself: it returns the payload to send, or false when the send has
// ended meanwhile (nothing to do). From DataStart to DataEnd the link owns
// the send.
func (p *Peer) DataStart(j Job) ([]byte, bool) {
	e := p.e
	r := j.send
	e.mu.Lock()
	defer e.mu.Unlock()
	if r == nil || e.inflight[j.SID] != r {
		return nil, false // ended by a failure sweep meanwhile
	}
	p.writing.Store(r)
	return r.buf.Bytes(), true
}

// DataHeader is the header of the DATA chunk of n bytes at off of job j.
func DataHeader(j Job, off, n int) Header {
	return Header{Kind: KindData, Count: int64(n), Seq: j.RID, SID: uint64(off)}
}

// DataEnd ends a KindData job begun by DataStart: the send completes, with
// err (the link's loss) if the chunks could not all be written.
func (p *Peer) DataEnd(j Job, err error) {
	e := p.e
	r := j.send
	e.mu.Lock()
	delete(e.inflight, j.SID)
	p.writing.Store(nil)
	e.mu.Unlock()
	if err != nil {
		err = r.c.peerErr(p, p.lossError(err))
	}
	r.complete(r.sendStatus(), err)
}
