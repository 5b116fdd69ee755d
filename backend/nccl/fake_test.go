package nccl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// The fake engine models what the communicator relies on NCCL for, in
// software, so that its logic (queueing, grouping, completion, checks,
// failures) runs in tests on machines without a GPU:
//
//   - each channel of each rank has one stream; its groups run one after
//     the other, a group only once it is sealed (on the stream) and all
//     groups before it have finished;
//   - the k-th send from rank a to rank b pairs with the k-th receive at b
//     from a (per direction, in issue order, no tags); a pair moves data
//     once both of its groups run, so a send and its receive in groups
//     that wait on each other's streams deadlock as on NCCL;
//   - a send larger than its receive completes both, cut short; a send
//     smaller than its receive completes the send and leaves the receive
//     (and its group, and the stream) hanging, as measured on the GPU
//     machine;
//   - launch answers ncclInProgress now and then, and settle says so a
//     few more times;
//   - an aborted rank's operations that have not paired never will.
//
// Buffers must be host memory. Registered as the driver "nccl-fake" in
// this package's tests.

func init() {
	backend.Register("nccl-fake", fakeDriver{})
	backend.Register("nccl-fake-ipc", fakeDriver{ipc: true})
}

// fakeDriver opens communicators on fake engines: the host connection is
// real (tcp), the GPU side is a fabric shared by the job's ranks in this
// process. With ipc ("nccl-fake-ipc"), every pair of ranks shares a GPU:
// no channels, the IPC path over host memory (hostIPC), with the host
// connection on shared memory, as openControl makes it for ranks that
// share a GPU.
type fakeDriver struct{ ipc bool }

func (d fakeDriver) Open(ctx context.Context, cfg backend.Config) (backend.Conn, error) {
	job := cfg.Job
	var ctl *control
	if job.Size > 1 {
		var err error
		if ctl, err = openControl(ctx, cfg, d.ipc); err != nil {
			return nil, err
		}
	}
	return openFake(ctx, job.Key, job.Rank, job.Size, cfg.Check, d.ipc, ctl, nil)
}

// openFake makes a communicator on the fake engine of rank in the fabric
// of key, around the host connection ctl, and connects its channels. Its
// derived communicators (Split) are made the same way, each on a fabric of
// its own.
func openFake(ctx context.Context, key string, rank, size int, check, ipc bool, ctl *control, fam *family) (*conn, error) {
	f := fabricFor(key)
	derive := func(ctx context.Context, s splitSpec) (*conn, error) {
		return openFake(ctx, fmt.Sprintf("%s/%d", key, s.id), s.rank, s.size, check, ipc, s.ctl, s.fam)
	}
	var path *ipcPath
	if ipc && size > 1 {
		on := make([]bool, size)
		for p := range on {
			on[p] = p != rank
		}
		path = newIPCPath(&hostIPC{}, on)
	}
	c := newConn(connOptions{
		rank: rank, size: size, check: check,
		eng: f.engine(rank), ctl: ctl, derive: derive, fam: fam, ipc: path,
	})
	warm := make([]byte, 2*size)
	err := c.connectAll(ctx, func(p int) (send, recv op) {
		send = op{peer: p, typ: backend.Uint8, count: 1, buf: hostBuf(warm[:1])}
		recv = op{peer: p, recv: true, typ: backend.Uint8, count: 1, buf: hostBuf(warm[1+p : 2+p])}
		return send, recv
	})
	if err != nil {
		c.Abort(err)
		c.Close()
		return nil, err
	}
	return c, nil
}

// hostBuf describes a byte slice.
func hostBuf(b []byte) backend.Buffer {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	return backend.Buffer{Ptr: p, Count: int64(len(b)), Type: backend.Uint8, Mem: backend.Host}
}

var fabrics struct {
	sync.Mutex
	m map[string]*fabric
}

// fabricFor returns the fabric of the job with key.
func fabricFor(key string) *fabric {
	fabrics.Lock()
	defer fabrics.Unlock()
	if fabrics.m == nil {
		fabrics.m = make(map[string]*fabric)
	}
	f := fabrics.m[key]
	if f == nil {
		f = &fabric{chans: make(map[[2]int]*fchan), seed: uint64(len(fabrics.m))*0x9e3779b97f4a7c15 + 1}
		fabrics.m[key] = f
	}
	return f
}

// fabric is the fake GPUs and links of one job.
type fabric struct {
	mu      sync.Mutex
	chans   map[[2]int]*fchan // by (sender, receiver)
	engines []*fakeEngine
	seed    uint64
	// inProgressEvery makes every n-th launch answer ncclInProgress (0:
	// every 3rd).
	inProgressEvery int
	launches        int
}

// fchan holds the unpaired sends and receives of one direction.
type fchan struct{ sends, recvs []*fop }

type fop struct {
	g       *fgroup
	o       op
	scratch []byte
	done    bool
}

type fgroup struct {
	e       *fakeEngine
	ch      int
	ops     []*fop
	sealed  bool
	dropped bool
}

func (g *fgroup) finished() bool {
	for _, o := range g.ops {
		if !o.done {
			return false
		}
	}
	return true
}

// engine returns rank's engine.
func (f *fabric) engine(rank int) *fakeEngine {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := &fakeEngine{f: f, rank: rank, streams: map[int][]*fgroup{}, settleLeft: map[int]int{}, aborted: map[int]bool{}}
	f.engines = append(f.engines, e)
	return e
}

type fakeEngine struct {
	f          *fabric
	rank       int
	streams    map[int][]*fgroup // by channel: unfinished groups, in order
	settleLeft map[int]int       // by channel
	aborted    map[int]bool      // by channel
	closed     bool
	maxStaged  int64 // the most host memory one group staged
}

var errFakeAborted = errors.New("fake nccl: the communicator was aborted")

func (e *fakeEngine) launch(g *group) (bool, error) {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.aborted[g.ch] || e.closed {
		return false, errFakeAborted
	}
	if e.settleLeft[g.ch] > 0 {
		return false, fmt.Errorf("fake nccl: ncclInvalidUsage: a group was issued while the last one was in progress")
	}
	fg := &fgroup{e: e, ch: g.ch}
	for i := range g.ops {
		o := g.ops[i]
		if o.buf.Mem != backend.Host && !o.scratch && !o.token {
			return false, fmt.Errorf("fake nccl: only host buffers")
		}
		fo := &fop{g: fg, o: o}
		if o.scratch || o.token {
			fo.scratch = make([]byte, o.bytes())
		}
		fg.ops = append(fg.ops, fo)
		if want := sendChan(o.peer); o.recv && g.ch != recvChan(o.peer) || !o.recv && g.ch != want {
			return false, fmt.Errorf("fake nccl: an op with rank %d on channel %d", o.peer, g.ch)
		}
		key := [2]int{e.rank, o.peer}
		if o.recv {
			key = [2]int{o.peer, e.rank}
		}
		ch := f.chans[key]
		if ch == nil {
			ch = new(fchan)
			f.chans[key] = ch
		}
		if o.recv {
			ch.recvs = append(ch.recvs, fo)
		} else {
			ch.sends = append(ch.sends, fo)
		}
	}
	g.res = fg
	e.streams[g.ch] = append(e.streams[g.ch], fg)
	e.maxStaged = max(e.maxStaged, g.staged)
	f.launches++
	every := f.inProgressEvery
	if every == 0 {
		every = 3
	}
	if f.launches%every == 0 {
		e.settleLeft[g.ch] = 1 + f.launches%3
		return true, nil
	}
	return false, nil
}

func (e *fakeEngine) settle(ch int) (bool, error) {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	if e.settleLeft[ch] > 0 {
		e.settleLeft[ch]--
		return true, nil
	}
	return false, nil
}

func (e *fakeEngine) seal(g *group) error {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	if e.settleLeft[g.ch] > 0 {
		return fmt.Errorf("fake nccl: sealed a group NCCL has not put on the stream yet")
	}
	g.res.(*fgroup).sealed = true
	return nil
}

func (e *fakeEngine) poll(g *group) (bool, error) {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	e.f.advance()
	fg := g.res.(*fgroup)
	return !fg.dropped && fg.finished(), nil
}

// running reports whether g's kernel runs: it is on the stream and first.
func running(g *fgroup) bool {
	st := g.e.streams[g.ch]
	return g.sealed && !g.dropped && len(st) > 0 && st[0] == g
}

// advance pairs sends with receives and retires finished groups, until
// nothing changes.
func (f *fabric) advance() {
	for changed := true; changed; {
		changed = false
		for _, ch := range f.chans {
			for len(ch.sends) > 0 && len(ch.recvs) > 0 {
				s, r := ch.sends[0], ch.recvs[0]
				if !running(s.g) || !running(r.g) {
					break
				}
				sb, rb := s.o.bytes(), r.o.bytes()
				n := min(sb, rb)
				if n > 0 {
					dst, src := r.scratch, s.scratch
					if dst == nil {
						dst = unsafe.Slice((*byte)(r.o.buf.Ptr), rb)
					}
					if src == nil {
						src = unsafe.Slice((*byte)(s.o.buf.Ptr), sb)
					}
					copy(dst[:n], src[:n])
				}
				s.done = true
				r.done = sb >= rb // a short send leaves the receive hanging
				ch.sends, ch.recvs = ch.sends[1:], ch.recvs[1:]
				changed = true
			}
		}
		for _, g := range f.heads() {
			if g.finished() {
				g.e.streams[g.ch] = g.e.streams[g.ch][1:]
				changed = true
			}
		}
	}
}

// heads returns the first group of every stream.
func (f *fabric) heads() []*fgroup {
	var out []*fgroup
	for _, e := range f.engines {
		for _, st := range e.streams {
			if len(st) > 0 {
				out = append(out, st[0])
			}
		}
	}
	return out
}

func (e *fakeEngine) finish(g *group)  {}
func (e *fakeEngine) release(g *group) {}

func (e *fakeEngine) waitOn(g *group, s *cuda.Stream) error { return nil }

func (e *fakeEngine) follow(ch int, s *cuda.Stream) error { return nil }

func (e *fakeEngine) copyBytes(dst, src unsafe.Pointer, n int64) error {
	copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(src), n))
	return nil
}

func (e *fakeEngine) allocTemp(n int64) (*tempMem, error) {
	return &tempMem{host: make([]byte, n)}, nil
}

func (e *fakeEngine) copyTemp(dst backend.Buffer, t *tempMem, n int64) error {
	copy(unsafe.Slice((*byte)(dst.Ptr), n), t.host[:n])
	return nil
}

func (e *fakeEngine) freeTemp(t *tempMem) {
	if t.host == nil {
		panic("fake nccl: temporary memory freed twice")
	}
	t.host = nil
}

func (e *fakeEngine) detach(ch int) func() error {
	return func() error { return e.abort(ch) }
}

func (e *fakeEngine) abort(ch int) error {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	e.aborted[ch] = true
	for _, fc := range f.chans {
		fc.sends = dropChan(fc.sends, e, ch)
		fc.recvs = dropChan(fc.recvs, e, ch)
	}
	for _, g := range e.streams[ch] {
		g.dropped = true
	}
	delete(e.streams, ch)
	e.settleLeft[ch] = 0
	return nil
}

func dropChan(l []*fop, e *fakeEngine, ch int) []*fop {
	out := l[:0]
	for _, o := range l {
		if o.g.e != e || o.g.ch != ch {
			out = append(out, o)
		}
	}
	clear(l[len(out):])
	return out
}

func (e *fakeEngine) close() error {
	e.f.mu.Lock()
	var chs []int
	for ch := range e.streams {
		chs = append(chs, ch)
	}
	e.f.mu.Unlock()
	for _, ch := range chs {
		e.abort(ch)
	}
	e.f.mu.Lock()
	e.closed = true
	e.f.mu.Unlock()
	return nil
}
