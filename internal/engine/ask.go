package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// Asking the other ranks what they wait for. A rank whose wait passed its
// timeout sends ASK to every peer its links still reach (AskReports); each
// answers with REPLY, carrying what the function SetReport gave returns
// (package mp's report of the process's pending operations). The answer
// is written by a goroutine of its own, started by the link's reader (or
// poller) when the ASK arrives, so it comes while every goroutine of the
// program is blocked in a wait: the links take frames whatever the
// program does. ASK and REPLY are numbered with the messages (Seq), so a
// rank's answer comes after everything it sent before it.

// asks is the engine's side of the questions it asks and answers.
type asks struct {
	report atomic.Pointer[func(max int) []byte]

	mu       sync.Mutex
	next     uint64                // the last question's id
	open     map[uint64]chan reply // questions waiting for replies, by id
	closed   bool                  // Close began: no new answer is written
	answers  int                   // goroutines writing answers
	answered chan struct{}         // capacity 1: a token when one of them ends
}

// reply is one rank's answer to a question, or, with gone, the news
// that its link ended (no answer will come).
type reply struct {
	rank   int
	report []byte
	gone   bool
}

// SetReport sets the function whose result this rank sends a rank that
// asks for its report: it is given the largest report the link to the
// asker carries and should fit it (a longer one is cut). nil (the
// default) answers with an empty report.
func (e *Engine) SetReport(f func(max int) []byte) {
	if f == nil {
		e.asks.report.Store(nil)
		return
	}
	e.asks.report.Store(&f)
}

// AskReports asks every other rank for its report and returns, by rank,
// the answers that came within timeout: a rank whose link is down, or that
// does not answer in time, is missing. It implements backend.Reporter.
func (e *Engine) AskReports(timeout time.Duration) map[int][]byte {
	out := map[int][]byte{}
	ch := make(chan reply, e.size)
	e.asks.mu.Lock()
	e.asks.next++
	id := e.asks.next
	if e.asks.open == nil {
		e.asks.open = map[uint64]chan reply{}
	}
	e.asks.open[id] = ch
	e.asks.mu.Unlock()
	defer func() {
		e.asks.mu.Lock()
		delete(e.asks.open, id)
		e.asks.mu.Unlock()
	}()
	asked := 0
	for _, p := range e.peers {
		if p == nil || p.downErr() != nil {
			continue
		}
		if p.link.Send(Header{Kind: KindAsk, SID: id}, nil) == nil {
			asked++
		}
	}
	if asked == 0 {
		return out
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	ended := map[int]bool{}
	for len(ended) < asked {
		select {
		case r := <-ch:
			if !r.gone {
				out[r.rank] = r.report
			}
			ended[r.rank] = true
		case <-t.C:
			return out
		}
	}
	return out
}

// gone tells the open questions that rank's link has ended.
func (a *asks) gone(rank int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ch := range a.open {
		select {
		case ch <- reply{rank: rank, gone: true}:
		default:
		}
	}
}

// onAsk answers a peer's question from a goroutine of its own (the
// report takes locks that a waiter polling this link may hold).
func (p *Peer) onAsk(h *Header) error {
	if err := p.checkSeq(h); err != nil {
		return err
	}
	a := &p.e.asks
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.answers++
	if a.answered == nil {
		a.answered = make(chan struct{}, 1)
	}
	a.mu.Unlock()
	id := h.SID
	go func() {
		defer a.done()
		var b []byte
		if f := a.report.Load(); f != nil {
			b = (*f)(int(p.eager))
		}
		if int64(len(b)) > p.eager {
			b = b[:p.eager]
		}
		// An error here is the link's end, which its reader reports.
		_ = p.link.Send(Header{Kind: KindReply, SID: id, Count: int64(len(b))}, b)
	}()
	return nil
}

// onReply hands a peer's answer to the question waiting for it; one that
// came too late is dropped.
func (p *Peer) onReply(h *Header, src Source) error {
	if err := p.checkSeq(h); err != nil {
		return err
	}
	b := make([]byte, h.Count)
	if err := src.ReadFull(b); err != nil {
		return err
	}
	a := &p.e.asks
	a.mu.Lock()
	ch := a.open[h.SID]
	a.mu.Unlock()
	if ch != nil {
		select {
		case ch <- reply{rank: p.rank, report: b}:
		default:
		}
	}
	return nil
}

// done counts an answer written (or given up).
func (a *asks) done() {
	a.mu.Lock()
	a.answers--
	a.mu.Unlock()
	select {
	case a.answered <- struct{}{}:
	default:
	}
}

// drain waits until no answer is being written, or d (if positive) has
// passed: an Abort lets the answers to the other ranks' questions go out
// before it ends the links (ranks whose waits time out together ask each
// other, and each aborts once it has its own answers).
func (a *asks) drain(d time.Duration) {
	var expired <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		expired = t.C
	}
	for {
		a.mu.Lock()
		n, ch := a.answers, a.answered
		a.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-ch:
		case <-expired:
			return
		}
	}
}

// closeAsks stops answering and waits for the answers being written
// (Close: the links have ended, so their writes fail at once).
func (a *asks) closeAsks() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.drain(0)
}

// answerDrain bounds how long Abort waits for answers being written.
const answerDrain = time.Second
