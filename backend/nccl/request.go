package nccl

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
)

// reqStage is where a request is in its life.
type reqStage uint8

const (
	stageQueued reqStage = iota // posted, waiting for a flush
	stageIssued                 // its op is in a group handed to NCCL
	stageLocal                  // a message to or from this rank itself, matched in memory
	stageIPC                    // on the IPC path (ipc.go): a rank that shares this rank's GPU
	stageDone                   // completed (result published)
)

// request is one send or receive.
//
// Everything but the completion state is guarded by the communicator's
// mutex, and every completion happens under it too: a reader that sees
// done (an atomic) sees the final status and error, and one that takes the
// mutex after any completion sees it whole.
type request struct {
	c      *conn
	recv   bool
	buf    backend.Buffer
	peer   int // destination or source
	tag    int
	caller uintptr
	stage  reqStage

	// seq is the message's number among those between this rank and peer
	// in its direction (checked mode: it ties a receive to the sender's
	// envelope).
	seq uint64
	// st is the status the request completes with; verdict the error a
	// receive completes with once its data has moved (a mismatch found by
	// the checks).
	st      backend.Status
	verdict error
	// early is the early message a checked receive took (see match.go):
	// it completes when that has landed and been copied.
	early *inMsg
	// coll is set for a collective: buf is its send buffer, recvBuf its
	// receive buffer; op and root as the kind needs (peer is -1).
	coll    backend.CollKind
	recvBuf backend.Buffer
	op      backend.ReduceOp
	root    int
	// ipc is what the IPC path keeps of the request (nil elsewhere).
	ipc *ipcReq
	// ipcHeld is what ipc points to on the IPC path: the object's own,
	// so that a message allocates none.
	ipcHeld ipcReq

	done atomic.Bool
	// isDone is done.Load as a func value, made once per request object
	// (recycling keeps it: it is bound to the object) for the waits that
	// poll the host connection until it reports true.
	isDone func() bool
	// pumped is isDone for a request of the IPC path: it first runs the
	// path's stages that no one else is running (conn.pumpIPC), so the
	// goroutine that waits moves its messages itself. Made once per
	// object, like isDone.
	pumped func() bool
	mu     sync.Mutex // guards doneCh and closed
	doneCh chan struct{}
	closed bool
	err    error
}

var reqPool = sync.Pool{New: func() any { return new(request) }}

// newRequest takes a request from the pool.
func newRequest(c *conn, recv bool, buf backend.Buffer, peer, tag int, caller uintptr) *request {
	r := reqPool.Get().(*request)
	r.c, r.recv, r.buf, r.peer, r.tag, r.caller = c, recv, buf, peer, tag, caller
	if r.isDone == nil {
		r.isDone = r.done.Load // once per object, before any waiter sees it
		r.pumped = func() bool {
			if !r.done.Load() {
				r.c.pumpIPC()
			}
			return r.done.Load()
		}
	}
	return r
}

// Release hands the request back for reuse; see backend.Request. The
// caller has observed completion, so nobody else touches the request; a
// request that has not completed is left alone (the communicator still
// holds it).
func (r *request) Release() {
	if !r.done.Load() {
		return
	}
	r.recycle()
}

// recycle resets r and puts it in the pool: Release, and the communicator
// itself for a request it made and never handed out.
func (r *request) recycle() {
	r.c, r.buf, r.caller, r.stage, r.seq = nil, backend.Buffer{}, 0, stageQueued, 0
	r.st, r.verdict, r.err, r.early = backend.Status{}, nil, nil, nil
	r.coll, r.recvBuf, r.op, r.root = 0, backend.Buffer{}, 0, 0
	r.doneCh, r.closed, r.ipc, r.ipcHeld = nil, false, nil, ipcReq{}
	r.done.Store(false)
	reqPool.Put(r)
}

// complete publishes the result. Called once, with the communicator's
// mutex held.
func (r *request) complete(st backend.Status, err error) {
	if r.stage == stageDone {
		return
	}
	r.stage = stageDone
	r.st, r.err = st, err
	r.mu.Lock()
	r.closed = true
	if r.doneCh != nil {
		close(r.doneCh)
	}
	r.mu.Unlock()
	r.done.Store(true)
}

// fail completes the request with err.
func (r *request) fail(err error) { r.complete(backend.Status{}, err) }

// Test implements backend.Request: it flushes the communicator's queued
// operations (so that a loop of Tests makes progress, as MPI's does) and
// reports whether this one has completed, without blocking.
func (r *request) Test() (bool, backend.Status, error) {
	if r.done.Load() {
		return true, r.st, r.err
	}
	r.c.poke()
	if r.done.Load() {
		return true, r.st, r.err
	}
	return false, backend.Status{}, nil
}

// Wait implements backend.Request: it flushes the queued operations and
// blocks the calling goroutine until this one completes, at most timeout
// (if positive), after which it returns an error matching
// backend.ErrTimeout and the request is still pending.
//
// The CPU polls the GPU while it waits (as cudaStreamSynchronize does by
// default), for up to spinFor; after that it sleeps and the communicator's
// progress goroutine polls.
func (r *request) Wait(timeout time.Duration) (backend.Status, error) {
	if r.done.Load() {
		return r.st, r.err
	}
	if err := r.c.wait(r, timeout); err != nil {
		return backend.Status{}, err
	}
	return r.st, r.err
}

// Done implements backend.Request. It flushes the queued operations, so
// that the request can complete while nobody waits for it.
func (r *request) Done() <-chan struct{} {
	if !r.done.Load() {
		r.c.poke()
	}
	return r.doneChan()
}

// doneChan returns the channel closed at completion.
func (r *request) doneChan() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return closedChan
	}
	if r.doneCh == nil {
		r.doneCh = make(chan struct{})
	}
	return r.doneCh
}

// closedChan is Done's answer for completed requests.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// info describes the request for Pending.
func (r *request) info() backend.OpInfo {
	op := "send"
	switch {
	case r.coll != 0:
		op = r.coll.String()
	case r.recv:
		op = "recv"
	}
	return backend.OpInfo{Op: op, Peer: r.peer, Tag: r.tag, Count: r.buf.Count, Type: r.buf.Type, Caller: r.caller}
}

// hostBytes is the size of the host memory of r's buffers (staged through
// the GPU's memory).
func (r *request) hostBytes() int64 {
	var n int64
	if r.buf.Mem == backend.Host {
		n = r.buf.Len()
	}
	if r.coll != 0 && r.coll != backend.Bcast && r.recvBuf.Mem == backend.Host {
		n += r.recvBuf.Len()
	}
	return n
}
