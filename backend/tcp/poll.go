package tcp

import (
	"errors"
	"runtime"
	"sync/atomic"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
)

// poller lets the goroutines that wait on a communicator's requests read
// its TCP links themselves (engine.Poller): a reply is taken by the
// goroutine that wants it, on its own thread, instead of by the reader
// goroutine, whose wake-up and hand-off cost tens of microseconds.
type poller struct {
	links    []*link
	ready    *readySet    // finds the links to read in one system call (nil: read each)
	idle     atomic.Bool  // the last poll found nothing: the next asks ready first
	spinners atomic.Int32 // goroutines between SpinStart and SpinEnd
}

var _ engine.Poller = (*poller)(nil)

// newPoller returns the poller of the links that have a descriptor to
// read without blocking, or nil if none has.
func newPoller(links []*link) *poller {
	p := &poller{}
	for _, l := range links {
		if l.rd.rc != nil {
			p.links = append(p.links, l)
			l.poller = p
		}
	}
	if len(p.links) == 0 {
		return nil
	}
	p.ready = newReadySet(p.links)
	return p
}

// Poll implements engine.Poller: each link hands the engine what its
// socket holds now, unless another goroutine is reading it.
func (p *poller) Poll() bool {
	// After a poll that found nothing, the next asks which links to read
	// (readySet); after one that found something, it reads every link
	// again: data that has come already is read at once, without the
	// ppoll before it. On 8 ranks of a 16-core host (4 interleaved
	// rounds, docs/benchmarks.md, "One ppoll for the links"), asking
	// every time made a loop of 8-byte Bcasts slower than reading every
	// link (19.9 µs a call against 19.4), asking after an idle poll alone
	// faster (19.0); 16 MiB Allreduces 15.7 ms against 19.7.
	if p.ready != nil && p.idle.Load() {
		if did, ok := p.ready.poll(p.links); ok {
			if did {
				p.idle.Store(false)
			}
			return did
		}
	}
	did := p.pollEach()
	if p.ready != nil && !did && !p.idle.Load() {
		p.idle.Store(true)
	}
	return did
}

// pollEach reads every link in turn (link.poll).
func (p *poller) pollEach() bool {
	did := false
	for _, l := range p.links {
		if l.poll() {
			did = true
		}
	}
	return did
}

// SpinStart implements engine.Poller.
func (p *poller) SpinStart() bool {
	p.spinners.Add(1)
	return true
}

// Spin implements engine.Poller: Poll.
func (p *poller) Spin() bool { return p.Poll() }

// SpinEnd implements engine.Poller: when the last waiter stops, what they
// left queued goes to the writer goroutines, and, if it parks, the reader
// goroutines go back to the netpoller at once (not after their tick), so
// that its request's arrival is taken without delay.
func (p *poller) SpinEnd(parking bool) {
	if p.spinners.Add(-1) == 0 {
		for _, l := range p.links {
			if l.qlen.Load() > 0 {
				l.handBack()
			}
			if parking {
				select {
				case l.kick <- struct{}{}:
				default:
				}
			}
		}
	}
}

// poll is a waiting goroutine's share of the link's work: the reading of
// what the socket holds now, without blocking, then the writer jobs that
// are queued, which it does holding nothing of the reading side. An error
// is left to the reader goroutine to report; a corrupt stream is closed
// here so that it wakes.
func (l *link) poll() bool {
	did := l.pollRead()
	if l.pollWrite() {
		did = true
	}
	return did
}

// pollRead is poll's reading half. When another goroutine holds the
// read lock (the reader goroutine, or another waiter), this one yields
// its P: the holder may be a goroutine of this rank waiting for a P (a
// rank of one P), which would otherwise hold the link until this
// waiter's next pause that hands the P on (engine.SpinPause, every 64
// polls), or its spin's end.
func (l *link) pollRead() bool {
	if l.rdDone.Load() {
		return false
	}
	if !l.rmu.TryLock() {
		runtime.Gosched()
		return false
	}
	did, err := l.rd.drain(l.p, true)
	l.rmu.Unlock()
	if untrusted(err) {
		l.nc.Close()
	}
	return did
}

// pollWrite is poll's writing half: the queued writer jobs a waiter runs.
func (l *link) pollWrite() bool {
	if l.qlen.Load() == 0 {
		return false
	}
	ran, _ := l.work(true)
	return ran
}

// untrusted reports whether err says the stream from the peer cannot be
// trusted any more (a malformed or corrupt frame): the link is closed, so
// that the reader goroutine wakes and the peer sees the end.
func untrusted(err error) bool {
	return errors.Is(err, engine.ErrFrame) || errors.Is(err, errShortSocket) || errors.Is(err, backend.ErrCorrupt)
}
