package shm

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// link is the shared-memory path to one rank of this host, the engine's
// Link: a ring in this rank's inbox that the peer fills (in), a ring in the
// peer's inbox that this rank fills (out), the peer's doorbell, and the
// unix socket the two met on, which now only tells when the peer is gone.
//
// Whoever polls takes in's records (under rmu) and flushes what waits for
// room in out (under wmu); rmu is never taken under wmu, so a poller that
// answers a frame (CTS, CTSDone) while it holds rmu cannot deadlock.
type link struct {
	h    *Hub
	p    *engine.Peer
	rank int
	pid  int

	in       *shmem.Ring
	out      *shmem.Ring
	peerBell shmem.Bell
	peerSeg  *shmem.Segment
	coll     collArea // the peer's collective area (Coll), in peerSeg
	uc       *net.UnixConn
	eager    int64
	pull     bool // the peer can read this rank's memory: offer it large sends
	read     atomic.Bool
	choose   chooser // pull or pipeline a user's large message (CopyAuto)
	dead     atomic.Bool

	// Splitting a pull with the sender (split.go).
	split      bool          // this rank asks the peer to help with its pulls
	claims     *shmem.Claims // beside in, in this rank's inbox: its pulls of the peer's messages
	peerClaims *shmem.Claims // beside out, in the peer's inbox: the peer's pulls of this rank's
	splitting  atomic.Bool   // claims is in use by a pull
	helped     atomic.Int64  // chunks this rank wrote into the peer's buffers

	rmu sync.Mutex
	hdr engine.Header // the header of the record being delivered; under rmu
	src record        // its payload; under rmu

	wmu     sync.Mutex
	sendSeq uint64   // under wmu
	q       []outbox // frames waiting for room in out, in order; under wmu
	nq      atomic.Int32
	byeSent bool // under wmu
	killed  sync.Once
}

// outbox is a frame that waits for room in the out ring: a copy of an
// eager payload, a writer job, or the DATA of a send that is under way.
type outbox struct {
	h       engine.Header
	data    []byte // an eager payload's copy (from the pool)
	job     engine.Job
	isJob   bool
	payload []byte // DATA: the send buffer
	off     int    // DATA: bytes written so far
	started bool   // DATA: DataStart has been called
}

// dataChunk bounds one DATA record of a pipelined message of n bytes: a
// large message moves in larger records (fewer hand-offs between the two
// copies), each within what the ring takes aligned.
func (l *link) dataChunk(n int) int {
	c := dataChunk
	if n >= streamFrom {
		c = streamChunk
	}
	return min(c, l.out.MaxRecord()-engine.HeaderSize-shmem.MaxAlign)
}

// alignFrom is the smallest payload put in the ring aligned to a cache
// line: from this size on a copy moves whole lines (and, on CPUs with fast
// string moves, as one instruction that wants an aligned destination).
const alignFrom = 2048

// EagerLimit implements engine.Link.
func (l *link) EagerLimit() int64 { return l.eager }

// Send implements engine.Link: the frame goes straight into the ring, or,
// when the ring is full, into the outbox, copied, in order.
func (l *link) Send(h engine.Header, payload []byte) error {
	if l.dead.Load() || !l.h.enter() {
		return errLinkDown
	}
	defer l.h.exit()
	l.wmu.Lock()
	h.Seq = l.sendSeq
	l.sendSeq++
	if len(l.q) == 0 && l.put(&h, payload) {
		l.wmu.Unlock()
		l.peerBell.Ring()
		return nil
	}
	ob := outbox{h: h}
	if len(payload) > 0 {
		ob.data = engine.GetBuf(len(payload))
		copy(ob.data, payload)
	}
	l.q = append(l.q, ob)
	l.nq.Store(int32(len(l.q)))
	l.flush()
	l.wmu.Unlock()
	return nil
}

var errLinkDown = errors.New("shared-memory link is down")

// Queue implements engine.Link.
func (l *link) Queue(j engine.Job) {
	if !l.h.enter() {
		return
	}
	defer l.h.exit()
	l.wmu.Lock()
	l.q = append(l.q, outbox{job: j, isJob: true})
	l.nq.Store(int32(len(l.q)))
	l.flush()
	l.wmu.Unlock()
}

// put writes one record into out if it fits now; under wmu.
func (l *link) put(h *engine.Header, payload []byte) bool {
	n := recordLen(h, len(payload))
	var b []byte
	if len(payload) >= alignFrom {
		// The payload's copies in and out run aligned.
		b = l.out.ReserveAligned(n, n-len(payload), shmem.MaxAlign)
	} else {
		b = l.out.ReserveLine(n) // a small message: one line with its header
	}
	if b == nil {
		return false
	}
	encode(b, h, payload, l.h.copyIn == CopyInStream)
	l.out.Commit()
	return true
}

// flush writes what the outbox holds while out has room, and reports
// whether it wrote anything; under wmu. When out fills, it asks the peer
// to ring this rank's bell once it has made room.
func (l *link) flush() bool {
	wrote := false
	defer func() {
		l.nq.Store(int32(len(l.q)))
		if wrote {
			l.peerBell.Ring()
		}
	}()
	for len(l.q) > 0 {
		ob := &l.q[0]
		if !l.flushOne(ob, &wrote) {
			// Stuck: ask for a ring of the bell when there is room, then
			// look once more, in case the room came before the ask.
			l.out.WantSpace()
			if !l.flushOne(ob, &wrote) {
				return wrote
			}
		}
		engine.PutBuf(ob.data)
		l.q[0] = outbox{}
		if len(l.q) == 1 {
			l.q = l.q[:0] // keeps the array: the next job allocates nothing
		} else {
			l.q = l.q[1:]
		}
	}
	return wrote
}

// flushOne writes ob, or as much of it as fits, and reports whether it is
// all written; under wmu.
func (l *link) flushOne(ob *outbox, wrote *bool) bool {
	if l.byeSent {
		return true // nothing goes after BYE
	}
	if !ob.isJob {
		if !l.put(&ob.h, ob.data) {
			return false
		}
		*wrote = true
		return true
	}
	j := ob.job
	switch j.Kind {
	case engine.KindCTS, engine.KindLeave:
		if l.p.Down() != nil {
			return true
		}
		h := j.Frame()
		if !l.put(&h, nil) {
			return false
		}
	case engine.KindBye:
		h := l.p.ByeHeader(false)
		if !l.put(&h, nil) {
			return false
		}
		l.byeSent = true
		l.uc.CloseWrite() // the peer's watcher sees the end after BYE
	case engine.KindData:
		if !ob.started {
			data, ok := l.p.DataStart(j)
			if !ok {
				return true
			}
			ob.payload, ob.started = data, true
		}
		chunk := l.dataChunk(len(ob.payload))
		stream := len(ob.payload) >= streamFrom
		for ob.off < len(ob.payload) {
			n := min(chunk, len(ob.payload)-ob.off)
			h := engine.DataHeader(j, ob.off, n)
			if stream {
				h.Flags |= engine.DataStream
			}
			if !l.put(&h, ob.payload[ob.off:ob.off+n]) {
				return false
			}
			*wrote = true
			ob.off += n
		}
		l.p.DataEnd(j, nil)
		return true
	}
	*wrote = true
	return true
}

// poll takes what has arrived and flushes what waits, without blocking.
func (l *link) poll() bool {
	did := false
	if l.in.Pending() && !l.dead.Load() && l.rmu.TryLock() {
		if !l.in.Empty() {
			did = l.drain(64)
		}
		l.rmu.Unlock()
	}
	if l.nq.Load() > 0 && l.wmu.TryLock() {
		if l.flush() {
			did = true
		}
		l.wmu.Unlock()
	}
	return did
}

// drain hands up to max records of in to the engine (max < 0: all);
// under rmu. A corrupt record ends the link.
func (l *link) drain(max int) bool {
	did := false
	for i := 0; max < 0 || i < max; i++ {
		if l.dead.Load() {
			break
		}
		b, err := l.in.Next()
		if err == nil && b == nil {
			break
		}
		if err == nil {
			if err = decode(b, l.p.EagerLimit(), &l.hdr, &l.src); err == nil {
				switch {
				case l.hdr.Kind == engine.KindCTS && l.hdr.Flags&engine.CTSHelp != 0:
					err = l.help(&l.hdr, &l.src)
				case l.hdr.Kind == engine.KindData && l.h.copy == CopyAuto:
					l.choose.data(&l.hdr)
					fallthrough
				default:
					err = l.p.Arrive(&l.hdr, &l.src)
				}
			}
			l.src = record{}
			l.in.Consume()
		}
		if err != nil {
			l.fail(err)
			break
		}
		did = true
	}
	if l.in.TakeSpaceWanted() {
		l.peerBell.Ring()
	}
	return did
}

// fail ends the link for err: every operation with the peer ends.
func (l *link) fail(err error) {
	l.dead.Store(true)
	l.p.Broken(err)
}

// PullAddr implements engine.Puller: every large message is offered where
// the peer can read this rank's memory; the peer chooses (WantPull).
func (l *link) PullAddr(buf []byte, tag int) (uint64, bool) {
	if !l.pull || len(buf) == 0 {
		return 0, false
	}
	return uint64(uintptrOf(buf)), true
}

// WantPull implements engine.Puller: a collective's message (a negative
// tag) is pulled, since every rank copies at once there and one copy each
// costs least; so is every message with CopySingle; a user's message with
// CopyAuto is taken the way that has moved bytes faster on this link
// (chooser).
//
// The chooser times a message from when it could begin: for a receive
// posted before the RTS came (called from this link's drain, the RTS in
// src), the RTS's writing; for one posted after, now.
func (l *link) WantPull(n int64, tag int, posted bool) bool {
	switch {
	case !l.read.Load():
		return false
	case tag < 0 || l.h.copy == CopySingle:
		return true
	case l.h.copy == CopyPipelined:
		return false
	}
	// src is this link's only when posted (read under its rmu). A stamp the
	// clock later steps back past makes a measurement of no time, which the
	// chooser leaves out.
	var ready int64
	if posted {
		ready = l.src.sent
	}
	if ready == 0 {
		ready = time.Now().UnixNano()
	}
	return l.choose.pull(n, ready)
}

// Pull implements engine.Puller: one copy out of the peer's memory, split
// with the peer for a user's message from splitFrom bytes (split.go).
func (l *link) Pull(dst []byte, addr, sid uint64, tag int) error {
	if !l.read.Load() {
		return fmt.Errorf("%w: this rank cannot read rank %d's memory", backend.ErrNotSupported, l.rank)
	}
	measure := tag >= 0 && l.h.copy == CopyAuto // the chooser's (WantPull)
	var n int
	var err error
	if l.canSplit(len(dst), tag) {
		n, err = l.pullSplit(dst, addr, sid)
	} else {
		n, err = shmem.ReadFrom(l.pid, dst, uintptr(addr))
	}
	if err == nil && measure {
		l.choose.pulled(int64(n), time.Now().UnixNano())
	}
	if errors.Is(err, shmem.ErrNotSupported) {
		l.read.Store(false)
		return fmt.Errorf("%w: %v", backend.ErrNotSupported, err)
	}
	if err == nil && n != len(dst) {
		err = fmt.Errorf("read %d of %d bytes from rank %d", n, len(dst), l.rank)
	}
	return err
}

// Goodbye implements engine.Link.
func (l *link) Goodbye(deadline time.Time) {
	l.uc.SetReadDeadline(deadline)
	l.Queue(engine.Job{Kind: engine.KindBye})
	// The engine is closing: if every link ended before (the peers left
	// first), nothing will count another, and the transport ends now.
	if l.h.live.Load() == 0 {
		l.h.end()
	}
}

// Kill implements engine.Link.
func (l *link) Kill(aborted bool) {
	if aborted && l.h.enter() {
		if l.wmu.TryLock() {
			if !l.byeSent {
				h := l.p.ByeHeader(true)
				if l.put(&h, nil) {
					l.peerBell.Ring()
				}
				l.byeSent = true
			}
			l.wmu.Unlock()
		}
		l.h.exit()
	}
	l.uc.Close()
	l.finish()
	// Kill is the engine's Close or Abort: once every link has ended (here
	// or before, when the peers left), the transport ends too.
	if l.h.live.Load() == 0 {
		l.h.end()
	}
}

// finish marks the link ended, once: by its watcher, or by Kill.
func (l *link) finish() {
	l.killed.Do(func() {
		l.dead.Store(true)
		// A large send stuck in the outbox is the link's to end.
		l.wmu.Lock()
		for i := range l.q {
			ob := &l.q[i]
			if ob.isJob && ob.job.Kind == engine.KindData && ob.started {
				l.p.DataEnd(ob.job, errLinkDown)
			}
			engine.PutBuf(ob.data)
		}
		l.q = nil
		l.nq.Store(0)
		l.wmu.Unlock()
		l.h.coll.wake()
		l.h.linkDone()
	})
}

// watch waits for the end of the unix socket: the peer closed its side
// after its BYE, or its process ended (the kernel closes its sockets), or
// this rank is ending the link. What the peer put in the ring before that
// is delivered first.
func (l *link) watch() {
	defer l.h.watchers.Done()
	defer l.finish()
	var b [1]byte
	_, err := l.uc.Read(b[:])
	if err == nil {
		err = fmt.Errorf("%w: rank %d wrote to the shared-memory link's socket", engine.ErrFrame, l.rank)
	}
	if l.h.enter() {
		l.rmu.Lock()
		if !l.dead.Load() {
			l.drain(-1)
		}
		l.rmu.Unlock()
		l.h.exit()
	}
	if l.h.e.Closing() && l.p.Bye() {
		return
	}
	l.fail(err)
}

// Transport names the link for reports.
func (l *link) Transport() string { return "shm" }

// uintptrOf is the address of b's first element.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
