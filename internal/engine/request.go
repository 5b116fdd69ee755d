package engine

import (
	"sync"
	"time"

	"github.com/courier-mp/courier/backend"
)

type reqKind uint8

const (
	reqSend reqKind = iota
	reqRecv
)

// request is one send or receive. Its owner at any moment is exactly one
// of: the engine (a posted receive, a send or receive waiting for its
// peer's CTS or DATA, guarded by Engine.mu), a link's reader (filling a
// receive's buffer), a link's writer (sending a large message's DATA), or
// the goroutine pulling a message into it. Only the owner completes it, so
// a request is never completed twice and its buffer is never touched after
// the user has it back.
type request struct {
	completion
	e      *Engine
	c      *Comm // the communicator: ranks below are its own
	kind   reqKind
	buf    backend.Buffer
	peer   int // destination, or source (AnySource) as posted
	tag    int
	caller uintptr
	id     uint64 // key in Engine.inflight while a rendezvous is under way
	got    int64  // DATA bytes received so far
	want   int64  // DATA bytes expected
	src    int    // receive: the matched sender
	mtag   int    // receive: the matched tag
	mcount int64  // receive: the message's element count
	hdr    Header // a large send's DATA frame header, handed to the link's writer
}

var reqPool = sync.Pool{New: func() any {
	r := new(request)
	r.init()
	return r
}}

func newRequest(c *Comm, kind reqKind, buf backend.Buffer, peer, tag int, caller uintptr) *request {
	r := c.e.spare.Swap(nil)
	if r == nil {
		r = reqPool.Get().(*request)
	}
	r.e, r.c, r.kind, r.buf, r.peer, r.tag, r.caller = c.e, c, kind, buf, peer, tag, caller
	return r
}

// Release returns the request to the engine's spare slot, or else to the
// pool; see backend.Request. The slot serves a program that posts one
// operation after another (a ping-pong's send, then its receive) without
// the pool's per-P bookkeeping.
func (r *request) Release() {
	if !r.isDone() {
		return // still the engine's: never recycled
	}
	r.reset()
	e := r.e
	r.e, r.c = nil, nil
	r.buf = backend.Buffer{}
	r.id, r.got, r.want, r.src, r.mtag, r.mcount = 0, 0, 0, 0, 0, 0
	if e != nil && e.spare.CompareAndSwap(nil, r) {
		return
	}
	reqPool.Put(r)
}

// Test implements backend.Request: it polls the transports once first, so
// a loop of Tests makes progress by itself.
func (r *request) Test() (bool, backend.Status, error) {
	if !r.isDone() {
		for _, p := range r.e.pollers {
			p.Poll()
		}
	}
	return r.completion.Test()
}

// Completed reports whether the request has completed, without polling
// the transports as Test does: for a goroutine that polls them itself, or
// that only looks.
func (r *request) Completed() bool { return r.isDone() }

// Notify has f called once the request completes, by the goroutine that
// completes it (a transport's, or one polling the engine), or at once if
// it has completed: for a goroutine that sleeps on something else and
// needs to hear of this request only when no one else will take it. f
// runs with the result published, under the request's lock: it must not
// block nor touch the request, and it may run after Test, Wait or
// Completed have reported the completion, but never after Release
// returns. One f per use of the request.
func (r *request) Notify(f func()) { r.completion.notify(f) }

// Wait implements backend.Request: with transports that can be polled,
// the waiting goroutine takes arrivals itself for a while before it parks.
func (r *request) Wait(timeout time.Duration) (backend.Status, error) {
	if !r.isDone() && len(r.e.pollers) > 0 {
		r.e.spin(r, timeout)
	}
	return r.completion.Wait(timeout)
}

func (r *request) info() backend.OpInfo {
	op := "send"
	if r.kind == reqRecv {
		op = "recv"
	}
	return backend.OpInfo{Op: op, Peer: r.peer, Tag: r.tag, Count: r.buf.Count, Type: r.buf.Type, Caller: r.caller}
}

// envelope is what matching and checking look at.
type envelope struct {
	src   int
	tag   int
	typ   backend.DType
	count int64
}

func (e *envelope) bytes() int64 { return e.count * int64(e.typ.Size()) }

func (e *envelope) status() backend.Status {
	return backend.Status{Source: e.src, Tag: e.tag, Count: e.count}
}

// message is an unexpected message: it arrived (or, for RTS, was announced)
// before a matching receive was posted.
type message struct {
	envelope
	kind  uint8 // KindEager or KindRTS
	sid   uint64
	addr  uint64 // RTS with pull: where the sender's payload is
	pull  bool
	data  []byte   // eager payload (from the pool), valid once ready
	ready bool     // eager: the payload has been read
	recv  *request // eager: a receive that matched before the payload was read
}
