package mp

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/courier-mp/courier/backend"
)

// An in-memory transport for the collectives' own tests: the ranks are
// goroutines of one process sharing a memWorld, a send waits until a
// receive takes it (so an algorithm that needs a transport to buffer its
// messages deadlocks here), and nothing allocates in steady state
// (requests are recycled, queues keep their capacity), so what a
// collective allocates is its own.

// memWorld is the state every rank of one in-memory job shares.
type memWorld struct {
	mu     sync.Mutex
	posted [][]*memReq // receives not yet matched, by receiving rank
	sent   [][]*memReq // sends not yet matched, by receiving rank
	free   []*memReq
	err    error // set by Abort
}

// memReq is one send or receive.
type memReq struct {
	w        *memWorld
	send     bool
	buf      backend.Buffer
	peer     int // the destination of a send, the source of a receive
	from     int // the sender of a send
	tag      int
	done     chan struct{} // one token when the request completes
	finished bool
	st       backend.Status
	err      error
}

// memConn is one rank's endpoint.
type memConn struct {
	w    *memWorld
	rank int
}

// memComms returns p communicators of one in-memory job, with timeout
// (0: waits without a bound, and then without a timer).
func memComms(p int, timeout time.Duration) []*Comm {
	w := &memWorld{posted: make([][]*memReq, p), sent: make([][]*memReq, p)}
	comms := make([]*Comm, p)
	for r := range comms {
		comms[r] = &Comm{conn: &memConn{w: w, rank: r}, rank: r, size: p, backendName: "mem", timeout: timeout}
	}
	return comms
}

// runMem runs f on every rank of a p-rank in-memory job and reports each
// rank's error.
func runMem(t testing.TB, p int, f func(c *Comm) error) {
	t.Helper()
	comms := memComms(p, 20*time.Second)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(c)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("%d ranks: rank %d: %v", p, r, err)
		}
	}
}

func (w *memWorld) get() *memReq {
	if n := len(w.free); n > 0 {
		r := w.free[n-1]
		w.free = w.free[:n-1]
		return r
	}
	return &memReq{w: w, done: make(chan struct{}, 1)}
}

func matches(recv, send *memReq) bool {
	return (recv.peer == send.from || recv.peer == backend.AnySource) &&
		(recv.tag == send.tag || recv.tag == backend.AnyTag && send.tag >= 0)
}

// deliver copies send into recv and completes both, under w.mu.
func (w *memWorld) deliver(send, recv *memReq) {
	n := send.buf.Len()
	var err error
	if n > recv.buf.Len() {
		err = fmt.Errorf("%w: %d bytes into %d", ErrTruncate, n, recv.buf.Len())
		n = recv.buf.Len()
	}
	copy(recv.buf.Bytes()[:n], send.buf.Bytes()[:n])
	count := send.buf.Len() / int64(max(recv.buf.Type.Size(), 1))
	recv.complete(backend.Status{Source: send.from, Tag: send.tag, Count: count}, err)
	send.complete(backend.Status{Source: send.from, Tag: send.tag, Count: send.buf.Count}, nil)
}

func (r *memReq) complete(st backend.Status, err error) {
	r.finished, r.st, r.err = true, st, err
	r.done <- struct{}{}
}

func (c *memConn) Isend(buf backend.Buffer, peer, tag int, _ uintptr) (backend.Request, error) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return nil, w.err
	}
	s := w.get()
	s.send, s.buf, s.peer, s.from, s.tag = true, buf, peer, c.rank, tag
	for i, q := range w.posted[peer] {
		if matches(q, s) {
			w.posted[peer] = slices.Delete(w.posted[peer], i, i+1)
			w.deliver(s, q)
			return s, nil
		}
	}
	w.sent[peer] = append(w.sent[peer], s)
	return s, nil
}

func (c *memConn) Irecv(buf backend.Buffer, peer, tag int, _ uintptr) (backend.Request, error) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return nil, w.err
	}
	q := w.get()
	q.send, q.buf, q.peer, q.from, q.tag = false, buf, peer, -1, tag
	for i, s := range w.sent[c.rank] {
		if matches(q, s) {
			w.sent[c.rank] = slices.Delete(w.sent[c.rank], i, i+1)
			w.deliver(s, q)
			return q, nil
		}
	}
	w.posted[c.rank] = append(w.posted[c.rank], q)
	return q, nil
}

func (c *memConn) Pending() []backend.OpInfo { return nil }

// Abort ends every unmatched operation of every rank with err.
func (c *memConn) Abort(err error) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
	for r := range w.posted {
		for _, q := range append(w.posted[r], w.sent[r]...) {
			q.complete(backend.Status{}, w.err)
		}
		w.posted[r], w.sent[r] = nil, nil
	}
}

func (c *memConn) Close() error { return nil }

func (r *memReq) Test() (bool, backend.Status, error) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return r.finished, r.st, r.err
}

func (r *memReq) Wait(timeout time.Duration) (backend.Status, error) {
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-r.done:
		case <-t.C:
			return backend.Status{}, fmt.Errorf("%w: the in-memory transport waited %v", ErrTimeout, timeout)
		}
	} else {
		<-r.done
	}
	r.done <- struct{}{} // for a later Wait or Test; Release takes it
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return r.st, r.err
}

func (r *memReq) Done() <-chan struct{} { panic("memReq.Done: the collectives do not use it") }

func (r *memReq) Release() {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if !r.finished {
		return
	}
	<-r.done
	r.finished, r.buf, r.st, r.err = false, backend.Buffer{}, backend.Status{}, nil
	w.free = append(w.free, r)
}

var _ backend.Conn = (*memConn)(nil)

// TestMemTransport: the in-memory transport matches in order, truncates,
// and fails every wait after Abort.
func TestMemTransport(t *testing.T) {
	comms := memComms(2, 5*time.Second)
	a, b := comms[0], comms[1]
	x, y := []int32{1, 2, 3}, []int32{4, 5}
	s1, _ := a.conn.Isend(describe(x), 1, 7, 0)
	s2, _ := a.conn.Isend(describe(y), 1, 7, 0)
	got := make([]int32, 3)
	r1, _ := b.conn.Irecv(describe(got), 0, 7, 0)
	st, err := b.wait(r1)
	if err != nil || st.Count != 3 || !slices.Equal(got, x) {
		t.Fatalf("first message: %v %+v %v", err, st, got)
	}
	short := make([]int32, 1)
	r2, _ := b.conn.Irecv(describe(short), 0, 7, 0)
	if _, err := b.wait(r2); !errors.Is(err, ErrTruncate) {
		t.Fatalf("second message into one element: %v", err)
	}
	for _, r := range []backend.Request{s1, s2, r1, r2} {
		r.Release()
	}
	r3, _ := b.conn.Irecv(describe(got), 0, 7, 0)
	b.conn.Abort(ErrAborted)
	if _, err := b.wait(r3); !errors.Is(err, ErrAborted) {
		t.Fatalf("a receive after Abort: %v", err)
	}
}
