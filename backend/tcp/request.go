package tcp

import (
	"sync"

	"github.com/courier-mp/courier/backend"
)

type reqKind uint8

const (
	reqSend reqKind = iota
	reqRecv
)

// request is one send or receive. Its owner at any moment is exactly one
// of: the matching engine (posted receive, send or receive waiting for its
// peer's CTS or DATA, guarded by conn.mu), a peer's reader (filling a
// receive's buffer), or a peer's writer (sending a large message's DATA).
// Only the owner completes it, so a request is never completed twice and
// its buffer is never touched after the user has it back.
type request struct {
	completion
	c      *conn
	kind   reqKind
	buf    backend.Buffer
	peer   int // destination, or source (AnySource) as posted
	tag    int
	caller uintptr
	id     uint64 // key in conn.inflight while a rendezvous is under way
	got    int64  // DATA bytes received so far
	want   int64  // DATA bytes expected
	src    int    // receive: the matched sender
	mtag   int    // receive: the matched tag
	mcount int64  // receive: the message's element count
}

var reqPool = sync.Pool{New: func() any {
	r := new(request)
	r.init()
	return r
}}

func newRequest(c *conn, kind reqKind, buf backend.Buffer, peer, tag int, caller uintptr) *request {
	r := reqPool.Get().(*request)
	r.c, r.kind, r.buf, r.peer, r.tag, r.caller = c, kind, buf, peer, tag, caller
	return r
}

// Release returns the request to the pool; see backend.Request.
func (r *request) Release() {
	if !r.isDone() {
		return // still the transport's: never recycled
	}
	r.reset()
	r.c = nil
	r.buf = backend.Buffer{}
	r.id, r.got, r.want, r.src, r.mtag, r.mcount = 0, 0, 0, 0, 0, 0
	reqPool.Put(r)
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
	kind  uint8 // kindEager or kindRTS
	sid   uint64
	data  []byte   // eager payload (from the pool), valid once ready
	ready bool     // eager: the payload has been read
	recv  *request // eager: a receive that matched before the payload was read
}
