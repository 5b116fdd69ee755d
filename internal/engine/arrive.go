package engine

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/courier-mp/courier/backend"
)

// Peer is the engine's side of the link to one other rank: what it knows
// of that rank, and the entry points the link calls.
type Peer struct {
	e      *Engine
	rank   int
	link   Link
	puller Puller
	eager  int64

	lost    error                   // under e.mu: why operations with this peer fail
	down    atomic.Pointer[error]   // the same, for senders that do not take e.mu
	bye     atomic.Bool             // the peer said it closed its communicator
	reading atomic.Pointer[request] // a receive the link's reader is filling
	writing atomic.Pointer[request] // a send the link's writer is transmitting
	readMsg *message                // an unexpected eager message being read (reader only; under e.mu to change)
	recvSeq uint64                  // reader only
}

// Source is where a frame's payload comes from while the link delivers
// it: the socket, or the ring record.
type Source interface {
	// ReadFull fills dst with the next len(dst) payload bytes.
	ReadFull(dst []byte) error
	// Discard skips the next n payload bytes.
	Discard(n int) error
}

// MemorySource is a Source whose payload is in this process's memory
// already (a shared-memory ring's record), so reading it never blocks.
type MemorySource interface {
	Source
	// Take returns the next n payload bytes where they lie, and skips
	// past them; false when they are not all in memory now. The bytes
	// are valid until Arrive returns.
	Take(n int) ([]byte, bool)
}

// inlineCopy is the largest payload of a MemorySource that the engine
// copies into a posted receive while it holds its lock.
const inlineCopy = 1024

// Rank is the peer's rank.
func (p *Peer) Rank() int { return p.rank }

// EagerLimit is the largest payload an EAGER frame from this peer may carry.
func (p *Peer) EagerLimit() int64 { return p.eager }

// Bye reports whether the peer has said goodbye: nothing more comes from
// it.
func (p *Peer) Bye() bool { return p.bye.Load() }

// Arrive hands the engine one frame from the peer, whose payload (EAGER,
// DATA) src supplies. An error means the link is corrupt or broken: the
// link must stop reading and report Broken.
func (p *Peer) Arrive(h *Header, src Source) error {
	switch h.Kind {
	case KindEager:
		return p.onEager(h, src)
	case KindRTS:
		return p.onRTS(h)
	case KindCTS:
		return p.onCTS(h)
	case KindData:
		return p.onData(h, src)
	case KindLeave:
		p.onLeave(h)
		return nil
	case KindBye:
		p.onBye(h)
		return nil
	case KindAsk:
		return p.onAsk(h)
	case KindReply:
		return p.onReply(h, src)
	}
	return fmt.Errorf("%w: kind %d", ErrFrame, h.Kind)
}

// Broken reports the end of the link: err is why (io.EOF when the peer's
// side closed). Every operation with the peer ends.
func (p *Peer) Broken(err error) {
	p.e.failPeer(p, p.lossError(err))
}

// checkSeq verifies a message's sequence number (reader only).
func (p *Peer) checkSeq(h *Header) error {
	if h.Seq != p.recvSeq {
		return fmt.Errorf("%w: message %d from rank %d arrived where %d was due", ErrFrame, h.Seq, p.rank, p.recvSeq)
	}
	p.recvSeq++
	return nil
}

func (p *Peer) onEager(h *Header, src Source) error {
	e := p.e
	if err := p.checkSeq(h); err != nil {
		return err
	}
	n := h.Count * int64(h.Type.Size())
	e.mu.Lock()
	c, from, err := p.route(h)
	if c == nil {
		e.mu.Unlock()
		if err != nil {
			return err
		}
		return src.Discard(int(n)) // for a communicator closed here
	}
	if c.refuses(int(h.Tag)) {
		e.mu.Unlock()
		return src.Discard(int(n)) // for a communicator revoked here
	}
	env := envelope{src: from, tag: int(h.Tag), typ: h.Type, count: h.Count}
	if r := c.takePosted(&env); r != nil {
		if n <= inlineCopy {
			if ms, ok := src.(MemorySource); ok {
				if b, ok := ms.Take(int(n)); ok {
					// A small payload in memory: copied under the lock, so
					// no sweep can come between, and the link need not
					// mark r as its own.
					err := e.verdict(r, &env)
					if err == nil {
						copy(r.buf.Bytes(), b)
					}
					e.mu.Unlock()
					r.complete(env.status(), err)
					return nil
				}
			}
		}
		p.reading.Store(r)
		e.mu.Unlock()
		err := e.verdict(r, &env)
		if err == nil {
			if rerr := src.ReadFull(r.buf.Bytes()[:n]); rerr != nil {
				p.reading.Store(nil)
				r.complete(env.status(), c.peerErr(p, p.lossError(rerr)))
				return rerr
			}
		} else if derr := src.Discard(int(n)); derr != nil {
			p.reading.Store(nil)
			r.complete(env.status(), c.peerErr(p, p.lossError(derr)))
			return derr
		}
		p.reading.Store(nil)
		r.complete(env.status(), err)
		return nil
	}
	m := newMessage(message{envelope: env, kind: KindEager})
	if n > 0 {
		m.data = getBuf(int(n))
	}
	c.unexpected = append(c.unexpected, m)
	p.readMsg = m
	e.mu.Unlock()
	err = src.ReadFull(m.data)
	e.mu.Lock()
	p.readMsg = nil
	r := m.recv
	m.recv = nil
	if err != nil {
		c.removeUnexpected(m)
		st := m.status()
		e.mu.Unlock()
		putBuf(m.data)
		freeMessage(m)
		if r != nil {
			r.complete(st, c.peerErr(p, p.lossError(err)))
		}
		return err
	}
	m.ready = true
	e.mu.Unlock()
	if r != nil {
		e.deliver(r, &m.envelope, m.data)
		putBuf(m.data)
		freeMessage(m)
	}
	return nil
}

func (p *Peer) onRTS(h *Header) error {
	e := p.e
	if err := p.checkSeq(h); err != nil {
		return err
	}
	pull := h.Flags&RTSPull != 0
	if pull && p.puller == nil {
		return fmt.Errorf("%w: rank %d offered a pulled rendezvous over a link that cannot pull", ErrFrame, p.rank)
	}
	e.mu.Lock()
	c, from, err := p.route(h)
	if c == nil {
		// For a communicator closed here: its sender learns of the close
		// from LEAVE and ends the send.
		e.mu.Unlock()
		return err
	}
	if c.refuses(int(h.Tag)) {
		// Revoked here: its sender, revoked too, ends the send.
		e.mu.Unlock()
		return nil
	}
	env := envelope{src: from, tag: int(h.Tag), typ: h.Type, count: h.Count}
	if r := c.takePosted(&env); r != nil {
		e.acceptRTS(r, &env, h.SID, h.Addr, pull, true) // unlocks
		return nil
	}
	c.unexpected = append(c.unexpected, newMessage(message{envelope: env, kind: KindRTS, sid: h.SID, addr: h.Addr, pull: pull}))
	e.mu.Unlock()
	return nil
}

func (p *Peer) onCTS(h *Header) error {
	e := p.e
	e.mu.Lock()
	r := e.inflight[h.SID]
	if r == nil {
		e.mu.Unlock()
		return nil // ended by a failure sweep, or its communicator's close; nothing to send
	}
	if r.kind != reqSend || r.c.toWorld(r.peer) != p.rank {
		e.mu.Unlock()
		return fmt.Errorf("%w: CTS from rank %d for a request it does not hold", ErrFrame, p.rank)
	}
	if h.Flags&CTSHelp != 0 {
		e.mu.Unlock()
		return fmt.Errorf("%w: rank %d asked for help with a pull over a link that does not split copies", ErrFrame, p.rank)
	}
	if h.Flags&CTSDone != 0 {
		delete(e.inflight, h.SID)
		e.mu.Unlock()
		r.complete(r.sendStatus(), nil)
		return nil
	}
	if h.Flags != 0 {
		delete(e.inflight, h.SID)
		e.mu.Unlock()
		reason := backend.ErrMismatch
		what := "disagrees on element type or count"
		if h.Flags&CTSTruncate != 0 {
			reason = backend.ErrTruncate
			what = "posted a smaller buffer"
		}
		r.complete(r.sendStatus(), fmt.Errorf("%w: rank %d sent %d × %v (tag %d); receiving rank %d %s",
			reason, r.c.rank, r.buf.Count, r.buf.Type, r.tag, r.peer, what))
		return nil
	}
	e.mu.Unlock()
	p.link.Queue(Job{Kind: KindData, SID: h.SID, RID: h.Seq, send: r})
	return nil
}

// PulledSend returns the payload of send sid, a large message to this peer
// that the peer is pulling, for a link whose receiver asks it to copy part
// of the payload itself (CTSHelp); false when no such send is in flight
// (it ended meanwhile). The send stays in flight until the peer's CTSDone:
// the receiver sends that only once every part it asked for is copied.
func (p *Peer) PulledSend(sid uint64) ([]byte, bool) {
	e := p.e
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.inflight[sid]
	if r == nil || r.kind != reqSend || r.c.toWorld(r.peer) != p.rank {
		return nil, false
	}
	return r.buf.Bytes(), true
}

func (p *Peer) onData(h *Header, src Source) error {
	e := p.e
	rid, off, n := h.Seq, int64(h.SID), h.Count
	e.mu.Lock()
	r := e.inflight[rid]
	if r == nil {
		if d, ok := e.discard[rid]; ok && d.peer == p && n <= d.left {
			// For a receive its communicator's close ended: read and
			// dropped.
			if d.left -= n; d.left == 0 {
				delete(e.discard, rid)
			} else {
				e.discard[rid] = d
			}
			e.mu.Unlock()
			return discardFull(src, n)
		}
	}
	if r == nil || r.kind != reqRecv || r.c.toWorld(r.src) != p.rank || off+n > r.want {
		e.mu.Unlock()
		return fmt.Errorf("%w: DATA from rank %d for %d bytes at %d of request %d, which is not expecting it", ErrFrame, p.rank, n, off, rid)
	}
	p.reading.Store(r)
	e.mu.Unlock()
	if err := src.ReadFull(r.buf.Bytes()[off : off+n]); err != nil {
		e.mu.Lock()
		delete(e.inflight, rid)
		p.reading.Store(nil)
		e.mu.Unlock()
		r.complete(backend.Status{Source: r.src, Tag: r.mtag, Count: r.mcount}, r.c.peerErr(p, p.lossError(err)))
		return err
	}
	r.got += n
	e.mu.Lock()
	done := r.got == r.want
	if done {
		delete(e.inflight, rid)
	}
	p.reading.Store(nil)
	e.mu.Unlock()
	if done {
		r.complete(backend.Status{Source: r.src, Tag: r.mtag, Count: r.mcount}, nil)
	}
	return nil
}

// discardFull reads n payload bytes from src into scratch memory and drops
// them.
func discardFull(src Source, n int64) error {
	b := getBuf(int(min(n, EagerLimit)))
	defer putBuf(b)
	for n > 0 {
		k := min(n, int64(len(b)))
		if err := src.ReadFull(b[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// owns reports whether p's link owns r; under e.mu.
func (p *Peer) owns(r *request) bool {
	return p.reading.Load() == r || p.writing.Load() == r
}

func (p *Peer) downErr() error {
	if e := p.e.dead.Load(); e != nil {
		return *e
	}
	if e := p.down.Load(); e != nil {
		return *e
	}
	return nil
}

// writeFailed turns a write error into the peer's loss.
func (p *Peer) writeFailed(err error) error {
	p.e.failPeer(p, p.lossError(err))
	return p.downErr()
}

// lossError explains why the link to p broke.
func (p *Peer) lossError(err error) error {
	if e := p.e.dead.Load(); e != nil {
		return *e
	}
	if p.bye.Load() {
		if d := p.down.Load(); d != nil {
			return *d // what the BYE said
		}
		return lostError(fmt.Errorf("%w: rank %d %w", backend.ErrPeerLost, p.rank, backend.ErrPeerClosed), p.rank)
	}
	if errors.Is(err, backend.ErrPeerLost) {
		return lostError(err, p.rank)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return lostError(fmt.Errorf("%w: rank %d: connection closed without a goodbye (process exited or was killed)", backend.ErrPeerLost, p.rank), p.rank)
	}
	if errors.Is(err, backend.ErrCorrupt) {
		return lostError(fmt.Errorf("%w: rank %d: the link was closed: %w", backend.ErrPeerLost, p.rank, err), p.rank)
	}
	return lostError(fmt.Errorf("%w: rank %d: %v", backend.ErrPeerLost, p.rank, err), p.rank)
}

// Down returns why operations with the peer fail, or nil.
func (p *Peer) Down() error { return p.downErr() }
