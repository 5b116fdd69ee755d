package tcp

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/internal/engine"
)

// link is the TCP connection to one other rank, the engine's Link.
//
// Reading: one parser of the stream (reader, read.go), driven under rmu by
// a waiting goroutine that polls the socket itself (poll.go) or, when
// nobody waits, by the reader goroutine, which sleeps in the netpoller
// until the socket is readable. Neither ever blocks on writing while it
// holds rmu, and the reader goroutine never writes at all: a rank always
// drains its sockets, so a peer's writes always finish and exchanges in
// both directions cannot deadlock on full socket buffers.
//
// Writing: user goroutines write EAGER and RTS frames themselves, one
// frame at a time under wmu; a writer goroutine does the jobs the reading
// side must not do itself (CTS answers, the DATA of large messages, BYE).
type link struct {
	e  *engine.Engine
	p  *engine.Peer
	nc net.Conn

	rmu    sync.Mutex // the reader's state: its goroutine's, or a waiter's
	rd     *reader
	rdDone atomic.Bool // the reader goroutine has returned
	poller *poller     // the communicator's, if this link can be polled

	wmu     sync.Mutex // one frame at a time on the socket
	whdr    [engine.HeaderSize]byte
	wsmall  []byte
	wbufs   net.Buffers
	wvec    [2][]byte
	sendSeq uint64 // under wmu

	qmu      sync.Mutex
	queue    []engine.Job
	qsig     chan struct{}
	quit     chan struct{}
	quitOnce sync.Once
}

func newLink(e *engine.Engine, nc net.Conn) *link {
	return &link{
		e:      e,
		nc:     nc,
		rd:     newReader(nc),
		wsmall: make([]byte, 0, engine.HeaderSize+smallWrite),
		qsig:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
	}
}

func (l *link) start() {
	l.e.Go(l.readLoop)
	l.e.Go(l.writeLoop)
}

// EagerLimit implements engine.Link.
func (l *link) EagerLimit() int64 { return engine.EagerLimit }

// Send implements engine.Link.
func (l *link) Send(h *engine.Header, payload []byte) error {
	l.wmu.Lock()
	h.Seq = l.sendSeq
	l.sendSeq++
	err := l.writeFrame(h, payload)
	l.wmu.Unlock()
	return err
}

// Queue implements engine.Link.
func (l *link) Queue(j engine.Job) {
	l.qmu.Lock()
	l.queue = append(l.queue, j)
	l.qmu.Unlock()
	select {
	case l.qsig <- struct{}{}:
	default:
	}
}

// Goodbye implements engine.Link: the writer sends BYE after what it
// already has queued.
func (l *link) Goodbye(deadline time.Time) {
	l.nc.SetDeadline(deadline)
	l.Queue(engine.Job{Kind: engine.KindBye})
}

// Kill implements engine.Link.
func (l *link) Kill(aborted bool) {
	if aborted {
		l.sayAborted()
	}
	l.quitOnce.Do(func() { close(l.quit) })
	l.nc.Close()
}

// writeFrame writes a header and payload as one frame; under l.wmu.
func (l *link) writeFrame(h *engine.Header, payload []byte) error {
	h.Encode(&l.whdr)
	if len(payload) <= smallWrite {
		b := append(l.wsmall[:0], l.whdr[:]...)
		b = append(b, payload...)
		_, err := l.nc.Write(b)
		return err
	}
	l.wvec[0], l.wvec[1] = l.whdr[:], payload
	l.wbufs = l.wvec[:]
	_, err := l.wbufs.WriteTo(l.nc)
	l.wvec[1] = nil
	return err
}

func (l *link) pop() (engine.Job, bool) {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if len(l.queue) == 0 {
		return engine.Job{}, false
	}
	j := l.queue[0]
	n := copy(l.queue, l.queue[1:])
	l.queue[n] = engine.Job{}
	l.queue = l.queue[:n]
	return j, true
}

func (l *link) writeLoop() {
	for {
		select {
		case <-l.qsig:
		case <-l.quit:
			return
		}
		for {
			j, ok := l.pop()
			if !ok {
				break
			}
			if j.Kind == engine.KindBye {
				l.sayBye()
				return
			}
			if err := l.run(j); err != nil {
				l.p.Broken(err)
			}
		}
	}
}

// run does one writer job.
func (l *link) run(j engine.Job) error {
	if j.Kind == engine.KindCTS {
		if l.p.Down() != nil {
			return nil
		}
		h := j.CTS()
		l.wmu.Lock()
		defer l.wmu.Unlock()
		return l.writeFrame(&h, nil)
	}
	return l.p.SendData(j, engine.MaxChunk, func(h *engine.Header, payload []byte) error {
		l.wmu.Lock()
		defer l.wmu.Unlock()
		return l.writeFrame(h, payload)
	})
}

// sayBye writes BYE after everything queued before it (a CTS refusal the
// peer is waiting for, say) and shuts down this side of the connection.
func (l *link) sayBye() {
	h := engine.Header{Kind: engine.KindBye}
	l.wmu.Lock()
	l.writeFrame(&h, nil)
	l.wmu.Unlock()
	if cw, ok := l.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// sayAborted tells the peer, if the socket is free at once, that this rank
// aborted, so it reports that rather than a vanished process.
func (l *link) sayAborted() {
	if !l.wmu.TryLock() {
		return
	}
	defer l.wmu.Unlock()
	l.nc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	h := engine.Header{Kind: engine.KindBye, Flags: engine.ByeAborted}
	l.writeFrame(&h, nil)
}

// Transport implements the engine's naming of links.
func (l *link) Transport() string { return TransportTCP }
