package tcp

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
)

// eagerLimit is the largest message sent eagerly: whole, without waiting
// for the receive. Larger messages use the rendezvous (RTS, CTS, DATA), so
// an unexpected large message costs the receiver 32 bytes, not its size.
const eagerLimit = 1 << eagerLog

const eagerLog = 16 // 64 KiB

// conn is one rank's endpoint: the matching engine and a peer per rank.
type conn struct {
	rank, size int
	check      bool
	peers      []*peer // nil at c.rank

	mu         sync.Mutex
	posted     []*request          // receives in the order they were posted
	unexpected []*message          // messages in the order they arrived
	inflight   map[uint64]*request // rendezvous under way, by id
	nextID     uint64
	fatal      error                 // set by Close or Abort: every new operation fails with it
	dead       atomic.Pointer[error] // fatal, for paths that do not take mu

	closeOnce sync.Once
	closeErr  error
	closing   atomic.Bool
	linger    time.Duration
	wg        sync.WaitGroup // readers and writers
}

func newConn(rank, size int, check bool) *conn {
	return &conn{
		rank:     rank,
		size:     size,
		check:    check,
		peers:    make([]*peer, size),
		inflight: make(map[uint64]*request),
		nextID:   1,
	}
}

// Isend implements backend.Conn.
func (c *conn) Isend(buf backend.Buffer, dest, tag int, caller uintptr) (backend.Request, error) {
	if dest < 0 || dest >= c.size {
		return nil, fmt.Errorf("%w: rank %d is not in [0, %d)", backend.ErrInvalid, dest, c.size)
	}
	if buf.Mem == backend.Device {
		staged, err := stageOut(buf)
		if err != nil {
			return nil, err
		}
		buf = staged
	}
	r := newRequest(c, reqSend, buf, dest, tag, caller)
	if dest == c.rank {
		if err := c.sendSelf(r); err != nil {
			return nil, err
		}
		return r, nil
	}
	p := c.peers[dest]
	if buf.Len() <= eagerLimit {
		err := p.sendEager(r)
		if err != nil {
			r.Release()
			return nil, err
		}
		r.complete(c.sendStatus(r), nil)
		return r, nil
	}
	c.mu.Lock()
	if err := c.usable(p); err != nil {
		c.mu.Unlock()
		r.Release()
		return nil, err
	}
	r.id = c.register(r)
	c.mu.Unlock()
	if err := p.sendRTS(r); err != nil {
		c.mu.Lock()
		_, mine := c.inflight[r.id]
		delete(c.inflight, r.id)
		c.mu.Unlock()
		if !mine {
			// A failure sweep completed it already; the user gets it.
			return r, nil
		}
		r.Release()
		return nil, err
	}
	return r, nil
}

func (c *conn) sendStatus(r *request) backend.Status {
	return backend.Status{Source: c.rank, Tag: r.tag, Count: r.buf.Count}
}

// usable reports why operations with peer p cannot start, under c.mu.
func (c *conn) usable(p *peer) error {
	if c.fatal != nil {
		return c.fatal
	}
	if p != nil && p.lost != nil {
		return p.lost
	}
	return nil
}

// register gives r an id for the rendezvous, under c.mu.
func (c *conn) register(r *request) uint64 {
	id := c.nextID
	c.nextID++
	c.inflight[id] = r
	return id
}

// sendSelf delivers a message to this rank: straight into a posted
// receive, or copied aside until one is posted. A send to oneself never
// waits for the receive, whatever its size.
func (c *conn) sendSelf(r *request) error {
	c.mu.Lock()
	if c.fatal != nil {
		c.mu.Unlock()
		r.Release()
		return c.fatal
	}
	env := envelope{src: c.rank, tag: r.tag, typ: r.buf.Type, count: r.buf.Count}
	if q := c.takePosted(&env); q != nil {
		c.mu.Unlock()
		c.deliver(q, &env, r.buf.Bytes())
		r.complete(c.sendStatus(r), nil)
		return nil
	}
	m := &message{envelope: env, kind: kindEager, ready: true}
	if n := r.buf.Len(); n > 0 {
		m.data = getBuf(int(n))
		copy(m.data, r.buf.Bytes())
	}
	c.unexpected = append(c.unexpected, m)
	c.mu.Unlock()
	r.complete(c.sendStatus(r), nil)
	return nil
}

// Irecv implements backend.Conn.
func (c *conn) Irecv(buf backend.Buffer, source, tag int, caller uintptr) (backend.Request, error) {
	if source != backend.AnySource && (source < 0 || source >= c.size) {
		return nil, fmt.Errorf("%w: rank %d is not in [0, %d)", backend.ErrInvalid, source, c.size)
	}
	if buf.Mem == backend.Device {
		host := make([]byte, buf.Len())
		r, err := c.Irecv(hostBuffer(host, buf), source, tag, caller)
		if err != nil {
			return nil, err
		}
		return &stagedRecv{Request: r, dev: buf, host: host}, nil
	}
	r := newRequest(c, reqRecv, buf, source, tag, caller)
	var p *peer
	if source >= 0 {
		p = c.peers[source]
	}
	c.mu.Lock()
	i := c.findUnexpected(source, tag)
	if i < 0 {
		if err := c.usable(p); err != nil {
			c.mu.Unlock()
			r.Release()
			return nil, err
		}
		c.posted = append(c.posted, r)
		c.mu.Unlock()
		return r, nil
	}
	m := c.unexpected[i]
	c.unexpected = slices.Delete(c.unexpected, i, i+1)
	switch {
	case m.kind == kindRTS:
		c.acceptRTS(r, &m.envelope, m.sid) // unlocks
	case m.ready:
		c.mu.Unlock()
		c.deliver(r, &m.envelope, m.data)
		putBuf(m.data)
	default:
		// The payload is still being read; the reader delivers it.
		m.recv = r
		c.mu.Unlock()
	}
	return r, nil
}

// removeUnexpected drops m from the unexpected queue if it is there;
// under c.mu.
func (c *conn) removeUnexpected(m *message) {
	if i := slices.Index(c.unexpected, m); i >= 0 {
		c.unexpected = slices.Delete(c.unexpected, i, i+1)
	}
}

// matches reports whether a receive posted for (source, tag) takes a
// message from src with mtag. AnyTag matches user tags only (>= 0).
func matches(source, tag, src, mtag int) bool {
	return (source == backend.AnySource || source == src) &&
		(tag == mtag || (tag == backend.AnyTag && mtag >= 0))
}

// findUnexpected returns the index of the oldest unexpected message a
// receive for (source, tag) matches, or -1; under c.mu.
func (c *conn) findUnexpected(source, tag int) int {
	for i, m := range c.unexpected {
		if matches(source, tag, m.src, m.tag) {
			return i
		}
	}
	return -1
}

// takePosted removes and returns the oldest posted receive that matches m,
// or nil; under c.mu.
func (c *conn) takePosted(m *envelope) *request {
	for i, r := range c.posted {
		if matches(r.peer, r.tag, m.src, m.tag) {
			c.posted = slices.Delete(c.posted, i, i+1)
			return r
		}
	}
	return nil
}

// verdict decides whether message m may land in receive r: nil, or the
// error r ends with. Element types must agree; with checks on, counts too.
func (c *conn) verdict(r *request, m *envelope) error {
	if m.typ != r.buf.Type {
		return fmt.Errorf("%w: rank %d sent %d × %v (tag %d), rank %d receives %v",
			backend.ErrMismatch, m.src, m.count, m.typ, m.tag, c.rank, r.buf.Type)
	}
	if m.count > r.buf.Count {
		return fmt.Errorf("%w: rank %d sent %d × %v (tag %d) into a buffer of %d on rank %d",
			backend.ErrTruncate, m.src, m.count, m.typ, m.tag, r.buf.Count, c.rank)
	}
	if c.check && m.count != r.buf.Count {
		return fmt.Errorf("%w: rank %d sent %d × %v (tag %d), rank %d receives %d (checks are on: counts must be equal)",
			backend.ErrMismatch, m.src, m.count, m.typ, m.tag, c.rank, r.buf.Count)
	}
	return nil
}

// deliver copies a whole payload into receive r and completes it. r is
// owned by the caller.
func (c *conn) deliver(r *request, m *envelope, payload []byte) {
	st := m.status()
	if err := c.verdict(r, m); err != nil {
		r.complete(st, err)
		return
	}
	copy(r.buf.Bytes(), payload)
	r.complete(st, nil)
}

// acceptRTS answers a rendezvous for receive r: it registers r for the
// DATA and sends CTS, or refuses. Called under c.mu; it unlocks.
func (c *conn) acceptRTS(r *request, m *envelope, sid uint64) {
	p := c.peers[m.src]
	r.src, r.mtag, r.mcount = m.src, m.tag, m.count
	st := m.status()
	var flags uint16
	err := c.verdict(r, m)
	switch {
	case errors.Is(err, backend.ErrTruncate):
		flags = ctsTruncate
	case err != nil:
		flags = ctsMismatch
	}
	if err == nil && p.lost != nil {
		err = p.lost
	}
	var id uint64
	if err == nil {
		r.want = m.bytes()
		id = c.register(r)
	}
	c.mu.Unlock()
	if err != nil {
		r.complete(st, err)
		if flags != 0 {
			p.queueCTS(sid, 0, flags)
		}
		return
	}
	p.queueCTS(sid, id, 0)
}

// Pending implements backend.Conn.
func (c *conn) Pending() []backend.OpInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []backend.OpInfo
	for _, r := range c.posted {
		out = append(out, r.info())
	}
	for _, m := range c.unexpected {
		if m.recv != nil {
			out = append(out, m.recv.info())
		}
	}
	ids := make([]uint64, 0, len(c.inflight))
	for id := range c.inflight {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, c.inflight[id].info())
	}
	for _, p := range c.peers {
		if p != nil {
			out = append(out, p.busy()...)
		}
	}
	return out
}

// failPeer ends every operation that depends on peer p with err and marks
// p lost. Requests owned by p's reader or writer are ended by them.
func (c *conn) failPeer(p *peer, err error) {
	c.mu.Lock()
	if p.lost == nil {
		p.lost = err
		e := err
		p.down.Store(&e)
	}
	err = p.lost
	var ended []*request
	keep := c.posted[:0]
	for _, r := range c.posted {
		if r.peer == p.rank {
			ended = append(ended, r)
		} else {
			keep = append(keep, r)
		}
	}
	clear(c.posted[len(keep):])
	c.posted = keep
	// Wildcard receives stay posted: another rank, or this one, may still
	// send what they wait for.
	// Unexpected messages stay: whole ones may still be received, and a
	// receive that matches an RTS from p ends with p's loss then. A message
	// still being read belongs to the reader.
	ended = c.takeInflight(p, ended)
	c.mu.Unlock()
	for _, r := range ended {
		r.complete(backend.Status{}, err)
	}
}

// failAll ends every operation with err and makes new ones fail with it.
// The first error wins.
func (c *conn) failAll(err error) {
	c.mu.Lock()
	if c.fatal == nil {
		c.fatal = err
		e := err
		c.dead.Store(&e)
	}
	err = c.fatal
	ended := slices.Clone(c.posted)
	clear(c.posted)
	c.posted = c.posted[:0]
	ended = c.takeInflight(nil, ended)
	c.mu.Unlock()
	for _, r := range ended {
		r.complete(backend.Status{}, err)
	}
}

// takeInflight removes from c.inflight, and appends to ended, every
// rendezvous with peer only (nil: with any peer) that no reader or writer
// owns (those end their own); under c.mu.
func (c *conn) takeInflight(only *peer, ended []*request) []*request {
	for id, r := range c.inflight {
		p := c.peerOf(r)
		if (only != nil && p != only) || (p != nil && p.owns(r)) {
			continue
		}
		delete(c.inflight, id)
		ended = append(ended, r)
	}
	return ended
}

func (c *conn) peerOf(r *request) *peer {
	rank := r.peer
	if r.kind == reqRecv {
		rank = r.src
	}
	if rank < 0 || rank >= c.size {
		return nil
	}
	return c.peers[rank]
}

// Abort implements backend.Conn.
func (c *conn) Abort(err error) {
	c.failAll(err)
	for _, p := range c.peers {
		if p != nil {
			p.sayAborted()
			p.stop()
			p.nc.Close()
		}
	}
}

// ErrPeerClosed is backend.ErrPeerClosed, the same value: part of the
// ErrPeerLost error of operations with a rank that closed its
// communicator in order.
//
// Deprecated: use backend.ErrPeerClosed, which every transport shares.
var ErrPeerClosed = backend.ErrPeerClosed

// Iprobe implements backend.Prober: the oldest message that arrived from
// source with tag and that no receive has taken. A message from a rank
// that is gone is still reported; when none is waiting, a probe of that
// rank fails with why it is gone.
func (c *conn) Iprobe(source, tag int) (bool, backend.Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fatal != nil {
		return false, backend.Status{}, c.fatal
	}
	for _, m := range c.unexpected {
		if m.recv == nil && matches(source, tag, m.src, m.tag) {
			return true, backend.Status{Source: m.src, Tag: m.tag, Count: m.count}, nil
		}
	}
	if source >= 0 && source < c.size && source != c.rank {
		if err := c.usable(c.peers[source]); err != nil {
			return false, backend.Status{}, err
		}
	}
	return false, backend.Status{}, nil
}
