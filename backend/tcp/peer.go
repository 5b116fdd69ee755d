package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
)

// peer is the connection to one other rank: a reader goroutine that parses
// frames and feeds the matching engine, a writer goroutine for the frames
// the reader must never write itself (CTS, and the DATA of large messages),
// and a mutex that lets user goroutines write small frames directly.
//
// The reader never writes and never waits for a user: a rank always drains
// its sockets, so a peer's writes always finish and exchanges in both
// directions cannot deadlock on full socket buffers.
type peer struct {
	c    *conn
	rank int
	nc   net.Conn
	br   *bufio.Reader

	lost    error                   // under c.mu: why operations with this peer fail
	down    atomic.Pointer[error]   // the same, for senders that do not take c.mu
	bye     atomic.Bool             // the peer said it closed its communicator
	reading atomic.Pointer[request] // a receive the reader is filling
	writing atomic.Pointer[request] // a send the writer is transmitting
	readMsg *message                // an unexpected eager message being read (reader only; under c.mu to change)

	wmu     sync.Mutex // one frame at a time on the socket
	whdr    [headerSize]byte
	wsmall  []byte
	wbufs   net.Buffers
	wvec    [2][]byte
	sendSeq uint64 // under wmu
	recvSeq uint64 // reader only

	qmu      sync.Mutex
	queue    []job
	qsig     chan struct{}
	quit     chan struct{}
	quitOnce sync.Once
}

// stop makes the writer return without writing what is queued.
func (p *peer) stop() { p.quitOnce.Do(func() { close(p.quit) }) }

// job is work for the writer: a CTS frame, the DATA of send r, or the
// BYE that ends the connection.
type job struct {
	r     *request // nil for a CTS
	id    uint64   // r's inflight id (DATA), or the sender's id (CTS)
	rid   uint64   // the receiver's id
	flags uint16   // CTS flags
	bye   bool     // write BYE, shut down the sending side, and stop
}

// smallWrite is the largest frame copied into one buffer for a single
// write; larger payloads go out with writev, uncopied.
const smallWrite = 4 << 10

func newPeer(c *conn, rank int, nc net.Conn) *peer {
	return &peer{
		c:      c,
		rank:   rank,
		nc:     nc,
		br:     bufio.NewReaderSize(nc, 64<<10),
		wsmall: make([]byte, 0, headerSize+smallWrite),
		qsig:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
	}
}

func (p *peer) start() {
	p.c.wg.Add(2)
	go p.readLoop()
	go p.writeLoop()
}

// owns reports whether p's reader or writer owns r; under c.mu.
func (p *peer) owns(r *request) bool {
	return p.reading.Load() == r || p.writing.Load() == r
}

// busy lists the requests p's goroutines own; under c.mu.
func (p *peer) busy() []backend.OpInfo {
	var out []backend.OpInfo
	if r := p.reading.Load(); r != nil {
		out = append(out, r.info())
	}
	if r := p.writing.Load(); r != nil {
		out = append(out, r.info())
	}
	if m := p.readMsg; m != nil && m.recv != nil {
		out = append(out, m.recv.info())
	}
	return out
}

func (p *peer) downErr() error {
	if e := p.c.dead.Load(); e != nil {
		return *e
	}
	if e := p.down.Load(); e != nil {
		return *e
	}
	return nil
}

// writeFrame writes a header and payload as one frame; under p.wmu.
func (p *peer) writeFrame(h *header, payload []byte) error {
	h.encode(&p.whdr)
	if len(payload) <= smallWrite {
		b := append(p.wsmall[:0], p.whdr[:]...)
		b = append(b, payload...)
		_, err := p.nc.Write(b)
		return err
	}
	p.wvec[0], p.wvec[1] = p.whdr[:], payload
	p.wbufs = p.wvec[:]
	_, err := p.wbufs.WriteTo(p.nc)
	p.wvec[1] = nil
	return err
}

// sendEager writes a whole small message.
func (p *peer) sendEager(r *request) error {
	if err := p.downErr(); err != nil {
		return err
	}
	h := header{Kind: kindEager, Type: r.buf.Type, Tag: int32(r.tag), Count: r.buf.Count}
	p.wmu.Lock()
	h.Seq = p.sendSeq
	p.sendSeq++
	err := p.writeFrame(&h, r.buf.Bytes())
	p.wmu.Unlock()
	if err != nil {
		return p.writeFailed(err)
	}
	return nil
}

// sendRTS announces a large message.
func (p *peer) sendRTS(r *request) error {
	if err := p.downErr(); err != nil {
		return err
	}
	h := header{Kind: kindRTS, Type: r.buf.Type, Tag: int32(r.tag), Count: r.buf.Count, SID: r.id}
	p.wmu.Lock()
	h.Seq = p.sendSeq
	p.sendSeq++
	err := p.writeFrame(&h, nil)
	p.wmu.Unlock()
	if err != nil {
		return p.writeFailed(err)
	}
	return nil
}

// writeFailed turns a write error into the peer's loss.
func (p *peer) writeFailed(err error) error {
	lost := p.lossError(err)
	p.c.failPeer(p, lost)
	return p.downErr()
}

// lossError explains why the connection to p broke.
func (p *peer) lossError(err error) error {
	if e := p.c.dead.Load(); e != nil {
		return *e
	}
	if p.bye.Load() {
		return fmt.Errorf("%w: rank %d %w", backend.ErrPeerLost, p.rank, backend.ErrPeerClosed)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: rank %d: connection closed without a goodbye (process exited or was killed)", backend.ErrPeerLost, p.rank)
	}
	return fmt.Errorf("%w: rank %d: %v", backend.ErrPeerLost, p.rank, err)
}

func (p *peer) queueCTS(sid, rid uint64, flags uint16) {
	p.push(job{id: sid, rid: rid, flags: flags})
}

func (p *peer) push(j job) {
	p.qmu.Lock()
	p.queue = append(p.queue, j)
	p.qmu.Unlock()
	select {
	case p.qsig <- struct{}{}:
	default:
	}
}

func (p *peer) pop() (job, bool) {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	if len(p.queue) == 0 {
		return job{}, false
	}
	j := p.queue[0]
	n := copy(p.queue, p.queue[1:])
	p.queue[n] = job{}
	p.queue = p.queue[:n]
	return j, true
}

func (p *peer) writeLoop() {
	defer p.c.wg.Done()
	for {
		select {
		case <-p.qsig:
		case <-p.quit:
			return
		}
		for {
			j, ok := p.pop()
			if !ok {
				break
			}
			if j.bye {
				p.sayBye()
				return
			}
			if err := p.run(j); err != nil {
				p.c.failPeer(p, p.lossError(err))
			}
		}
	}
}

// sayBye writes BYE after everything queued before it (a CTS refusal the
// peer is waiting for, say) and shuts down this side of the connection.
func (p *peer) sayBye() {
	h := header{Kind: kindBye}
	p.wmu.Lock()
	p.writeFrame(&h, nil)
	p.wmu.Unlock()
	if cw, ok := p.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// sayAborted tells the peer, if the socket is free at once, that this rank
// aborted, so it reports that rather than a vanished process.
func (p *peer) sayAborted() {
	if !p.wmu.TryLock() {
		return
	}
	defer p.wmu.Unlock()
	p.nc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	h := header{Kind: kindBye, Flags: byeAborted}
	p.writeFrame(&h, nil)
}

// run does one writer job.
func (p *peer) run(j job) error {
	if j.r == nil {
		if p.downErr() != nil {
			return nil
		}
		h := header{Kind: kindCTS, Flags: j.flags, Seq: j.rid, SID: j.id}
		p.wmu.Lock()
		defer p.wmu.Unlock()
		return p.writeFrame(&h, nil)
	}
	c := p.c
	r := j.r
	c.mu.Lock()
	if c.inflight[j.id] != r {
		c.mu.Unlock() // ended by a failure sweep meanwhile
		return nil
	}
	p.writing.Store(r)
	c.mu.Unlock()
	data := r.buf.Bytes()
	var err error
	if err = p.downErr(); err == nil {
		for off := 0; off < len(data); off += maxChunk {
			n := min(maxChunk, len(data)-off)
			h := header{Kind: kindData, Count: int64(n), Seq: j.rid, SID: uint64(off)}
			p.wmu.Lock()
			err = p.writeFrame(&h, data[off:off+n])
			p.wmu.Unlock()
			if err != nil {
				err = p.lossError(err)
				break
			}
		}
	}
	c.mu.Lock()
	delete(c.inflight, j.id)
	p.writing.Store(nil)
	c.mu.Unlock()
	r.complete(c.sendStatus(r), err)
	return err
}

func (p *peer) readLoop() {
	defer p.c.wg.Done()
	var hb [headerSize]byte
	for {
		_, err := io.ReadFull(p.br, hb[:])
		if err == nil {
			var h header
			if h, err = decodeHeader(hb[:]); err == nil {
				err = p.onFrame(&h)
			}
		}
		if err != nil {
			p.readFailed(err)
			return
		}
		if hb[0] == kindBye && p.c.closing.Load() {
			return // both sides said goodbye: nothing more will come
		}
	}
}

func (p *peer) onFrame(h *header) error {
	switch h.Kind {
	case kindEager:
		return p.onEager(h)
	case kindRTS:
		return p.onRTS(h)
	case kindCTS:
		return p.onCTS(h)
	case kindData:
		return p.onData(h)
	case kindBye:
		p.bye.Store(true)
		if h.Flags&byeAborted != 0 {
			p.c.failPeer(p, fmt.Errorf("%w: rank %d aborted its communicator", backend.ErrPeerLost, p.rank))
		} else {
			p.c.failPeer(p, fmt.Errorf("%w: rank %d %w", backend.ErrPeerLost, p.rank, backend.ErrPeerClosed))
		}
	}
	return nil
}

// checkSeq verifies a message's sequence number; under c.mu.
func (p *peer) checkSeq(h *header) error {
	if h.Seq != p.recvSeq {
		return fmt.Errorf("%w: message %d from rank %d arrived where %d was due", errFrame, h.Seq, p.rank, p.recvSeq)
	}
	p.recvSeq++
	return nil
}

func (p *peer) onEager(h *header) error {
	c := p.c
	env := envelope{src: p.rank, tag: int(h.Tag), typ: h.Type, count: h.Count}
	n := env.bytes()
	c.mu.Lock()
	if err := p.checkSeq(h); err != nil {
		c.mu.Unlock()
		return err
	}
	if r := c.takePosted(&env); r != nil {
		p.reading.Store(r)
		c.mu.Unlock()
		err := c.verdict(r, &env)
		if err == nil {
			_, err = io.ReadFull(p.br, r.buf.Bytes()[:n])
			if err != nil {
				p.reading.Store(nil)
				r.complete(env.status(), p.lossError(err))
				return err
			}
		} else if _, derr := p.br.Discard(int(n)); derr != nil {
			p.reading.Store(nil)
			r.complete(env.status(), p.lossError(derr))
			return derr
		}
		p.reading.Store(nil)
		r.complete(env.status(), err)
		return nil
	}
	m := &message{envelope: env, kind: kindEager}
	if n > 0 {
		m.data = getBuf(int(n))
	}
	c.unexpected = append(c.unexpected, m)
	p.readMsg = m
	c.mu.Unlock()
	_, err := io.ReadFull(p.br, m.data)
	c.mu.Lock()
	p.readMsg = nil
	r := m.recv
	m.recv = nil
	if err != nil {
		c.removeUnexpected(m)
		c.mu.Unlock()
		putBuf(m.data)
		if r != nil {
			r.complete(env.status(), p.lossError(err))
		}
		return err
	}
	m.ready = true
	c.mu.Unlock()
	if r != nil {
		c.deliver(r, &m.envelope, m.data)
		putBuf(m.data)
	}
	return nil
}

func (p *peer) onRTS(h *header) error {
	c := p.c
	env := envelope{src: p.rank, tag: int(h.Tag), typ: h.Type, count: h.Count}
	c.mu.Lock()
	if err := p.checkSeq(h); err != nil {
		c.mu.Unlock()
		return err
	}
	if r := c.takePosted(&env); r != nil {
		c.acceptRTS(r, &env, h.SID) // unlocks
		return nil
	}
	c.unexpected = append(c.unexpected, &message{envelope: env, kind: kindRTS, sid: h.SID})
	c.mu.Unlock()
	return nil
}

func (p *peer) onCTS(h *header) error {
	c := p.c
	c.mu.Lock()
	r := c.inflight[h.SID]
	if r == nil {
		c.mu.Unlock()
		return nil // ended by a failure sweep; nothing to send
	}
	if r.kind != reqSend || r.peer != p.rank {
		c.mu.Unlock()
		return fmt.Errorf("%w: CTS from rank %d for a request it does not hold", errFrame, p.rank)
	}
	if h.Flags != 0 {
		delete(c.inflight, h.SID)
		c.mu.Unlock()
		reason := backend.ErrMismatch
		what := "disagrees on element type or count"
		if h.Flags&ctsTruncate != 0 {
			reason = backend.ErrTruncate
			what = "posted a smaller buffer"
		}
		r.complete(c.sendStatus(r), fmt.Errorf("%w: rank %d sent %d × %v (tag %d); receiving rank %d %s",
			reason, c.rank, r.buf.Count, r.buf.Type, r.tag, p.rank, what))
		return nil
	}
	c.mu.Unlock()
	p.push(job{r: r, id: h.SID, rid: h.Seq})
	return nil
}

func (p *peer) onData(h *header) error {
	c := p.c
	rid, off, n := h.Seq, int64(h.SID), h.Count
	c.mu.Lock()
	r := c.inflight[rid]
	if r == nil || r.kind != reqRecv || r.src != p.rank || off+n > r.want {
		c.mu.Unlock()
		return fmt.Errorf("%w: DATA from rank %d for %d bytes at %d of request %d, which is not expecting it", errFrame, p.rank, n, off, rid)
	}
	p.reading.Store(r)
	c.mu.Unlock()
	if _, err := io.ReadFull(p.br, r.buf.Bytes()[off:off+n]); err != nil {
		c.mu.Lock()
		delete(c.inflight, rid)
		p.reading.Store(nil)
		c.mu.Unlock()
		r.complete(backend.Status{Source: r.src, Tag: r.mtag, Count: r.mcount}, p.lossError(err))
		return err
	}
	r.got += n
	c.mu.Lock()
	done := r.got == r.want
	if done {
		delete(c.inflight, rid)
	}
	p.reading.Store(nil)
	c.mu.Unlock()
	if done {
		r.complete(backend.Status{Source: r.src, Tag: r.mtag, Count: r.mcount}, nil)
	}
	return nil
}

// readFailed ends the reader: the peer is lost (or this rank is closing).
func (p *peer) readFailed(err error) {
	p.c.failPeer(p, p.lossError(err))
}
