package nccl

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

// Matching by tag, in checked mode.
//
// With checks, every message's envelope (sequence number, tag, element
// type, count) comes over the host connection when its send is posted, so
// a receiver knows what is on its channel from a rank before it takes it.
// A receive then matches as in MPI: the oldest message from its source
// with its tag. The channel still delivers in order, so when a receive
// matches a later message, the earlier ones that no receive has taken yet
// are taken off the wire first, into temporary device memory ("early"
// messages), and a receive that matches one later gets it by a copy.
// Sends never wait for any of this, so it cannot hang a valid program.
//
// A small message (up to eagerLimit) that no posted receive matches is
// taken off the wire into temporary memory as soon as it is announced, so
// that its sender completes without waiting for the receive, as the tcp
// backend's eager messages do (programs that send small messages with
// blocking Sends before the peer receives them rely on it). A larger one
// waits on the wire until a receive matches it or a later message.
//
// The receives of a checked communicator do not go through the queue: a
// receive is issued as soon as it has matched an announced message (and
// everything before that message on its channel is issued too), in a
// group of the channel's receives.

// eagerLimit is the size up to which an unmatched message is received
// early (the tcp backend's eager limit).
const eagerLimit = 64 << 10

// inMsg is a message announced by its envelope.
type inMsg struct {
	env envelope
	r   *request // the receive that took it, once matched
	// tmp holds an early message: taken off the wire before a receive
	// matched it. landed: its data is there (its group finished).
	tmp    *tempMem
	landed bool
}

// bytes is the size of the message's payload.
func (m *inMsg) bytes() int64 { return m.env.count * int64(m.env.typ.Size()) }

// tempMem is memory an early message waits in. The real engine gives
// device memory (addr); the fake, host memory (host).
type tempMem struct {
	addr uintptr
	host []byte
	res  any // the engine's handle
}

// matchRecvLocked matches checked receive r from another rank: with the
// oldest early message with its tag, else the oldest announced one, else
// it waits in the peer's posted receives. It reports false if r can never
// match (its peer is gone and announced nothing it could take).
func (c *conn) matchRecvLocked(r *request) bool {
	p := &c.peers[r.peer]
	if i := slices.IndexFunc(p.early, func(m *inMsg) bool { return m.r == nil && int(m.env.tag) == r.tag }); i >= 0 {
		m := p.early[i]
		p.early = slices.Delete(p.early, i, i+1)
		c.takeEarlyLocked(r, m)
		return true
	}
	if i := slices.IndexFunc(p.msgs, func(m *inMsg) bool { return m.r == nil && int(m.env.tag) == r.tag }); i >= 0 {
		p.msgs[i].r = r
		c.issueRecvsLocked(r.peer)
		return true
	}
	if p.lost != nil {
		return false
	}
	p.posted = append(p.posted, r)
	return true
}

// announceLocked takes the envelope of the next message from rank p: the
// oldest posted receive with its tag takes it, and is issued.
func (c *conn) announceLocked(p int, e envelope) {
	pe := &c.peers[p]
	m := &inMsg{env: e}
	if i := slices.IndexFunc(pe.posted, func(r *request) bool { return r.tag == int(e.tag) }); i >= 0 {
		m.r = pe.posted[i]
		pe.posted = slices.Delete(pe.posted, i, i+1)
	}
	pe.msgs = append(pe.msgs, m)
	if m.r != nil || m.bytes() <= eagerLimit {
		c.issueRecvsLocked(p)
	}
}

// issueRecvsLocked issues, as one group on the channel from rank p, every
// announced message up to the last one a receive has matched or that is
// small enough to take early: matched ones into their receive's buffer (or
// scratch memory, if the checks refuse them), the others into temporary
// memory. If the channel is still launching its last group, the peer is
// marked and progressLocked retries.
func (c *conn) issueRecvsLocked(p int) {
	pe := &c.peers[p]
	ch := recvChan(p)
	last := -1
	for i, m := range pe.msgs {
		if m.r != nil || m.bytes() <= eagerLimit {
			last = i
		}
	}
	if last < 0 || c.chans[ch].err != nil {
		return
	}
	if c.chans[ch].launching() {
		pe.issueWanted = true
		return
	}
	pe.issueWanted = false
	g := c.getGroup()
	g.ch = ch
	for _, m := range pe.msgs[:last+1] {
		if m.r != nil {
			c.prepareMatchedLocked(m.r, &m.env, g)
			continue
		}
		if !c.prepareEarlyLocked(p, m, g) {
			break
		}
	}
	clear(pe.msgs[:last+1])
	pe.msgs = pe.msgs[last+1:]
	if len(pe.msgs) == 0 {
		pe.msgs = nil
	}
	if len(g.ops) == 0 {
		c.putGroup(g)
		return
	}
	c.launchLocked(g)
}

// prepareMatchedLocked adds receive r of the message with envelope env to
// g: into r's buffer, or into scratch memory when the checks refuse it
// (it must still leave the wire). A message of no bytes completes r at
// once.
func (c *conn) prepareMatchedLocked(r *request, env *envelope, g *group) {
	r.stage = stageIssued
	r.st = backend.Status{Source: r.peer, Tag: int(env.tag), Count: env.count}
	o := op{r: r, recv: true, peer: r.peer, buf: r.buf, typ: env.typ, count: env.count}
	if v := c.verdict(r, env); v != nil {
		r.verdict = v
		o.scratch = true
	}
	if o.bytes() == 0 {
		r.complete(r.st, r.verdict)
		return
	}
	g.ops = append(g.ops, o)
}

// prepareEarlyLocked adds message m, which no receive has taken, to g, to
// land in temporary memory, and lists it among p's early messages. It
// reports false if no memory could be had (the channel is then failed).
func (c *conn) prepareEarlyLocked(p int, m *inMsg, g *group) bool {
	c.peers[p].early = append(c.peers[p].early, m)
	n := m.bytes()
	if n == 0 {
		m.landed = true
		return true
	}
	t, err := c.eng.allocTemp(n)
	if err != nil {
		c.failChanLocked(g.ch, err)
		return false
	}
	m.tmp = t
	o := op{early: m, recv: true, peer: p, typ: m.env.typ, count: m.env.count}
	if t.addr != 0 {
		o.addr = t.addr
	} else {
		o.buf = backend.Buffer{Ptr: unsafe.Pointer(&t.host[0]), Count: n, Type: backend.Uint8, Mem: backend.Host}
	}
	g.ops = append(g.ops, o)
	return true
}

// takeEarlyLocked gives early message m to receive r: at once if it has
// landed, else when it does (landedLocked).
func (c *conn) takeEarlyLocked(r *request, m *inMsg) {
	r.stage = stageIssued
	r.early = m
	r.st = backend.Status{Source: r.peer, Tag: int(m.env.tag), Count: m.env.count}
	r.verdict = c.verdict(r, &m.env)
	m.r = r
	if m.landed {
		c.deliverEarlyLocked(m)
	}
}

// landedLocked is called when an early message's group has finished.
func (c *conn) landedLocked(m *inMsg) {
	m.landed = true
	if m.r != nil {
		c.deliverEarlyLocked(m)
	}
}

// deliverEarlyLocked copies a landed early message into the receive that
// took it (unless the checks refused it), frees its memory and completes
// the receive.
func (c *conn) deliverEarlyLocked(m *inMsg) {
	r := m.r
	if r.verdict == nil && m.tmp != nil {
		if err := c.eng.copyTemp(r.buf, m.tmp, m.bytes()); err != nil {
			r.verdict = err
		}
	}
	if m.tmp != nil {
		c.eng.freeTemp(m.tmp)
		m.tmp = nil
	}
	r.complete(r.st, r.verdict)
}

// verdictOf decides whether a message from rank src (tag, count × typ)
// may land in receive r: nil, or the error r completes with. Element types
// and tags must agree, the message must fit, and with checks on the counts
// must be equal.
func (c *conn) verdictOf(r *request, src, tag int, typ backend.DType, count int64) error {
	if typ != r.buf.Type {
		return fmt.Errorf("%w: rank %d sent %d × %v (tag %d), rank %d receives %v (tag %d)",
			backend.ErrMismatch, src, count, typ, tag, c.rank, r.buf.Type, r.tag)
	}
	if tag != r.tag {
		return fmt.Errorf("%w: rank %d's next message to rank %d has tag %d, but rank %d receives tag %d "+
			"(the nccl backend takes each rank's messages in the order they were sent)",
			backend.ErrMismatch, src, c.rank, tag, c.rank, r.tag)
	}
	if count > r.buf.Count {
		return fmt.Errorf("%w: rank %d sent %d × %v (tag %d) into a buffer of %d on rank %d",
			backend.ErrTruncate, src, count, typ, tag, r.buf.Count, c.rank)
	}
	if c.check && count != r.buf.Count {
		return fmt.Errorf("%w: rank %d sent %d × %v (tag %d), rank %d receives %d (checks are on: counts must be equal)",
			backend.ErrMismatch, src, count, typ, tag, c.rank, r.buf.Count)
	}
	return nil
}

// verdict is verdictOf for the envelope of a message from r's peer.
func (c *conn) verdict(r *request, e *envelope) error {
	return c.verdictOf(r, r.peer, int(e.tag), e.typ, e.count)
}

// failRecvsLocked ends the checked receives from rank p that have not been
// issued (posted, or matched to a message not yet issued, or waiting for
// an early message) with err. drop also forgets what p announced (its
// channel is gone).
func (c *conn) failRecvsLocked(p int, err error, drop bool) {
	pe := &c.peers[p]
	for _, r := range pe.posted {
		r.fail(err)
	}
	pe.posted = nil
	if !drop {
		return
	}
	for _, m := range pe.msgs {
		if m.r != nil {
			m.r.fail(err)
		}
	}
	pe.msgs = nil
	for _, m := range pe.early {
		if m.r != nil {
			m.r.fail(err)
		}
		if m.tmp != nil {
			c.eng.freeTemp(m.tmp)
			m.tmp = nil
		}
	}
	pe.early = nil
	pe.issueWanted = false
}

// pendingRecvs describes the checked receives from p not yet on the GPU.
func (pe *peer) pendingRecvs(out []backend.OpInfo) []backend.OpInfo {
	for _, r := range pe.posted {
		out = append(out, r.info())
	}
	for _, m := range pe.msgs {
		if m.r != nil {
			out = append(out, m.r.info())
		}
	}
	return out
}

// Iprobe implements backend.Prober. Only with checks does a rank know what
// is on its channels before it takes it (the envelopes): without them, and
// for AnySource and AnyTag, it returns ErrNotSupported. It reports the
// oldest message from source with tag that no receive has matched: to
// this rank itself, one sent and not yet taken; from another, one whose
// envelope has come.
func (c *conn) Iprobe(source, tag int) (bool, backend.Status, error) {
	if source == backend.AnySource || tag == backend.AnyTag {
		return false, backend.Status{}, fmt.Errorf("%w: the nccl backend cannot probe for AnySource or AnyTag", backend.ErrNotSupported)
	}
	if source < 0 || source >= c.size {
		return false, backend.Status{}, fmt.Errorf("%w: rank %d is not in [0, %d)", backend.ErrInvalid, source, c.size)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fatal != nil {
		return false, backend.Status{}, c.fatal
	}
	if source == c.rank {
		for _, m := range c.self.msgs {
			if m.tag == tag {
				return true, backend.Status{Source: c.rank, Tag: tag, Count: m.count}, nil
			}
		}
		return false, backend.Status{}, nil
	}
	if ip := c.ipcPeerOf(source); ip != nil {
		ok, st := c.ipcProbeLocked(ip, tag)
		if !ok && ip.descEnd != nil {
			return false, backend.Status{}, ip.descEnd
		}
		return ok, st, nil
	}
	if !c.check {
		return false, backend.Status{}, fmt.Errorf("%w: probing a message on the nccl backend needs COURIER_CHECK=1 (without it NCCL carries no envelope, so nothing is known of a message before it is received)",
			backend.ErrNotSupported)
	}
	p := &c.peers[source]
	for _, l := range [][]*inMsg{p.early, p.msgs} { // early ones came first
		for _, m := range l {
			if m.r == nil && int(m.env.tag) == tag {
				return true, backend.Status{Source: source, Tag: tag, Count: m.env.count}, nil
			}
		}
	}
	if err := c.chans[recvChan(source)].err; err != nil {
		return false, backend.Status{}, err
	}
	if p.lost != nil {
		return false, backend.Status{}, p.lost
	}
	return false, backend.Status{}, nil
}
