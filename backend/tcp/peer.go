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
	e     *engine.Engine
	p     *engine.Peer
	nc    net.Conn
	eager int64 // the largest payload sent whole

	rmu    sync.Mutex // the reader's state: its goroutine's, or a waiter's
	rd     *reader
	rdDone atomic.Bool   // the reader goroutine has returned
	poller *poller       // the communicator's, if this link can be polled
	kick   chan struct{} // capacity 1: wakes the reader goroutine from its tick (poller.SpinEnd)

	wmu     sync.Mutex // one frame at a time on the socket
	whdr    [engine.HeaderSize]byte
	wsmall  []byte
	wbufs   net.Buffers
	wvec    [2][]byte
	sendSeq uint64 // under wmu

	qmu      sync.Mutex
	queue    []engine.Job
	qbusy    bool         // a goroutine is running the queue's jobs; under qmu
	qlen     atomic.Int32 // len(queue), for pollers that look without qmu
	qsig     chan struct{}
	quit     chan struct{}
	quitOnce sync.Once
}

func newLink(e *engine.Engine, nc net.Conn) *link {
	nc = ownConn(nc)
	return &link{
		e:      e,
		nc:     nc,
		rd:     newReader(nc),
		eager:  engine.EagerLimit,
		wsmall: make([]byte, 0, engine.HeaderSize+smallWrite),
		qsig:   make(chan struct{}, 1),
		kick:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
	}
}

func (l *link) start() {
	l.e.Go(l.readLoop)
	l.e.Go(l.writeLoop)
}

// EagerLimit implements engine.Link.
func (l *link) EagerLimit() int64 { return l.eager }

// Send implements engine.Link.
func (l *link) Send(h engine.Header, payload []byte) error {
	l.wmu.Lock()
	h.Seq = l.sendSeq
	l.sendSeq++
	err := l.writeFrame(&h, payload)
	l.wmu.Unlock()
	return err
}

// Queue implements engine.Link. While goroutines wait on the
// communicator's requests, polling its links, the job is theirs: the one
// that finds it runs it (write.go), without waking the writer goroutine.
// BYE is always the writer goroutine's.
func (l *link) Queue(j engine.Job) {
	l.qmu.Lock()
	l.queue = append(l.queue, j)
	l.qlen.Store(int32(len(l.queue)))
	wake := !l.qbusy && (j.Kind == engine.KindBye || l.poller == nil || l.poller.spinners.Load() == 0)
	l.qmu.Unlock()
	if wake {
		l.signal()
	}
}

// signal wakes the writer goroutine.
func (l *link) signal() {
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

// Transport implements the engine's naming of links.
func (l *link) Transport() string { return TransportTCP }
