package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
)

// Timing of the communicator's own polling.
const (
	// spinFor is how long Wait polls the GPU from the waiting goroutine
	// before it sleeps (and the progress goroutine polls, every 10 to
	// 500 µs): long enough that transfers of gigabytes are seen done
	// within a microsecond or so, short enough not to burn a core for
	// long on a wait for a slow peer. (At 20 ms, 64 messages of 128 MiB,
	// 24 ms on 2 H200s, were seen done up to 0.5 ms late: 1-2 % of their
	// bandwidth. C's cudaStreamSynchronize spins without end.)
	spinFor = 250 * time.Millisecond
	// minPoll and maxPoll bound the progress goroutine's polling interval
	// (it backs off from the first to the second while work is in flight).
	minPoll = 10 * time.Microsecond
	maxPoll = 500 * time.Microsecond
	// lostGrace is how long operations already on the GPU with a rank that
	// left get to finish before the communicator is aborted for them: a
	// rank that sent its last message and closed has delivered it, and the
	// receive completes on its own.
	lostGrace = 500 * time.Millisecond
	// abortBound is how long an ncclCommAbort may take before courier
	// stops waiting for it (it goes on in the background). An abort frees
	// the communicator's device memory, and freeing device memory waits
	// for every kernel on the GPU, including another channel's receive
	// that waits for a peer (measured: an abort of one channel hung while
	// the other channel's receive was pending). So courier aborts the
	// channels that must go at once, each on a thread of its own, and
	// tells the peers first, so that they abort their side.
	abortBound = 10 * time.Second
	// asyncCheckPolls is how often (in polls of its groups) a channel with
	// work on the GPU asks NCCL for an asynchronous error while nothing is
	// being launched: every 0.1 ms or so while a waiter spins, every 0.5 s
	// or so when only the progress goroutine polls.
	asyncCheckPolls = 1024
	// spinClock and spinYield: a spinning waiter reads the clock (for its
	// deadline and spinFor) every spinClock polls, and lets other
	// goroutines run every spinYield polls. Both cost as much as a poll.
	spinClock = 32
	spinYield = 64
	// stageCap bounds the host memory a channel stages at once (pinned
	// and device copies of host buffers): a flush of many large host
	// messages issues them in groups of about this much, each once the
	// earlier ones are done, instead of all at once. A single larger
	// message still goes, alone.
	stageCap = 256 << 20
)

// conn is one rank's endpoint of an NCCL communicator: it implements
// backend.Conn.
//
// # Channels
//
// NCCL runs the kernels of one communicator one after the other, whatever
// the streams, and a receive's kernel waits for its message. On a single
// communicator, a receive issued early (Irecv, then Test) would therefore
// hold back every later operation of the rank, including a send its peer
// waits for before it sends the message the receive wants: valid MPI
// programs would hang. So each direction between two ranks has its own
// NCCL communicator of two ranks and its own stream (a channel): a rank's
// sends to p go on one, its receives from p on another. A pending
// operation then holds back only later operations of the same direction
// with the same rank, which NCCL would deliver after it anyway: no pattern
// of valid programs can hang on the streams, and first contact on a
// channel is symmetric by construction (one send, one receive). A rank
// has 2(N−1) channels.
//
// # How operations move
//
// Isend and Irecv only queue the operation. Every Wait, Test or Done
// flushes the queue: the queued operations of each channel go to NCCL as
// one group (ncclGroupStart, every ncclSend or ncclRecv, ncclGroupEnd, in
// one C call with the device's context current) on the channel's stream.
//
// A group is on the stream once ncclGroupEnd (blocking communicators, the
// default), or after ncclInProgress ncclCommGetAsyncError (non-blocking
// ones), says so; only then are the copies that follow it queued and its
// seal put behind it (the write of its number to the channel's completion
// word, or an event record: either made earlier would prove nothing), and
// only then may the channel take another group. A request completes when
// its group's seal is seen. A channel's groups finish in order.
//
// Without checks, messages from one rank are received in the order they
// were sent: NCCL has no tags. A message to oneself never touches NCCL: it
// is matched in memory by tag, as MPI does, and copied. Messages with
// negative tags (the library's own) go over the host connection.
//
// # Checks
//
// With checks, each send's envelope goes over the host connection when
// the send is posted, and a receive reaches NCCL only once it has matched
// an announced message (by tag, as in MPI; see match.go): it then asks
// NCCL for exactly the message, or, when the envelope shows a mismatch,
// takes the message into scratch memory and fails with an error that names
// both ranks. Waiting for envelopes cannot hang a valid program: sends
// never wait, and a receive waits only for a message its peer has posted
// or will post.
type conn struct {
	rank, size int
	dev        int // the CUDA device device buffers must be on
	check      bool
	eng        engine
	ctl        *control // the host connection to every other rank; nil with one rank
	// world: the engine has a communicator of every rank, on channel
	// worldChan(size), which runs the collectives (Collective).
	world bool

	mu        sync.Mutex
	queue     []*request // posted, not yet issued, in posting order
	chans     []channel  // by channel number; those of this rank itself are unused
	wantFlush bool       // a wait, test or Done asked for the queue to be issued
	fatal     error      // set by Close or Abort: every new operation fails with it
	closing   bool
	peers     []peer
	self      selfQueue
	groups    []*group // free groups, for reuse
	// Scratch for issueLocked, by channel: the group being built, and
	// whether the channel is open or blocked in this flush.
	pick       []*group
	flushState []uint8
	touched    []int

	envOut [envSize]byte // an outgoing envelope, under mu

	// connecting counts connectAll's first-contact operations not done.
	connecting int
	// warming: the communicator of every rank is being connected in the
	// background (startWarm), and its channel takes nothing until then;
	// warmDone is closed when that has ended.
	warming, warmQuitting bool
	warmDone, warmQuit    chan struct{}

	trace *traceStats // timings of every group, when COURIER_NCCL_TRACE is set

	stageCap int64 // stageCap, but for tests

	wake      chan struct{} // wakes the progress goroutine
	spinners  atomic.Int32  // goroutines polling in wait: the progress goroutine stands aside
	busy      atomic.Bool   // work is in flight (as progressLocked last found)
	stop      chan struct{} // closed by Close: goroutines end
	wg        sync.WaitGroup
	aborts    sync.WaitGroup // channel aborts in flight (abortChan)
	closeOnce sync.Once
	closeErr  error
}

// channel is the communicator's record of one channel.
type channel struct {
	inflight []*group // issued, not yet finished, in stream order
	// err is set once the channel's NCCL communicator is gone (aborted):
	// operations on it fail with err.
	err error
	// graceUntil: the channel's peer is gone and the channel has work on
	// the GPU; if none of it finishes by then, the channel is aborted.
	graceUntil time.Time
	// sinceCheck counts polls since ncclCommGetAsyncError was last asked.
	sinceCheck int
}

// launching reports whether the channel's newest group is still being
// launched (ncclInProgress): nothing may be issued on it until it is not.
func (ch *channel) launching() bool {
	n := len(ch.inflight)
	return n > 0 && ch.inflight[n-1].launching
}

// peer is what the communicator knows of one other rank.
type peer struct {
	// lost says why the rank is gone (nil: it is not). Sends to it fail;
	// receives of what it sent before it left may still complete.
	lost error
	// Checked mode (see match.go): the sequence number of the next
	// message to the rank, and of the next envelope from it; the messages
	// it announced that are not issued yet, in order; those taken off the
	// wire before a receive matched them; the receives that have not
	// matched a message yet; and whether issueRecvsLocked must be retried
	// (the channel was busy launching).
	sendSeq, envNext uint64
	msgs, early      []*inMsg
	posted           []*request
	issueWanted      bool
	envIn            [envSize]byte // the control reader's buffer
}

// connOptions configures newConn.
type connOptions struct {
	rank, size int
	dev        int
	check      bool
	eng        engine
	ctl        *control
	trace      *traceStats
	world      bool
}

// newConn makes a communicator around an engine (and, with more than one
// rank, the host connection), and starts its goroutines.
func newConn(o connOptions) *conn {
	c := &conn{
		rank:       o.rank,
		size:       o.size,
		dev:        o.dev,
		check:      o.check,
		eng:        o.eng,
		ctl:        o.ctl,
		world:      o.world,
		chans:      make([]channel, 2*o.size+1),
		peers:      make([]peer, o.size),
		pick:       make([]*group, 2*o.size+1),
		flushState: make([]uint8, 2*o.size+1),
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		trace:      o.trace,
		stageCap:   stageCap,
	}
	c.wg.Add(1)
	go c.run()
	if c.ctl != nil {
		for p := range c.size {
			if p != c.rank {
				c.wg.Add(1)
				go c.ctl.read(c, p)
			}
		}
	}
	return c
}

// chanOf returns the channel of request r.
func chanOf(r *request) int {
	if r.coll != 0 {
		return worldChan(r.c.size)
	}
	if r.recv {
		return recvChan(r.peer)
	}
	return sendChan(r.peer)
}

// validate checks a buffer before it is queued.
func (c *conn) validate(buf backend.Buffer) error {
	if !buf.Type.Valid() {
		return fmt.Errorf("%w: element type %v", backend.ErrInvalid, buf.Type)
	}
	if buf.Count < 0 {
		return fmt.Errorf("%w: negative count %d", backend.ErrInvalid, buf.Count)
	}
	if buf.Count > 0 && buf.Ptr == nil {
		return fmt.Errorf("%w: a buffer of %d elements with no memory", backend.ErrInvalid, buf.Count)
	}
	switch buf.Mem {
	case backend.Host:
	case backend.Device:
		if buf.Device != c.dev {
			return fmt.Errorf("%w: the buffer is on cuda:%d, this rank's communicator on cuda:%d (one GPU per rank; see %s)",
				backend.ErrInvalid, buf.Device, c.dev, DeviceEnv)
		}
	default:
		return fmt.Errorf("%w: memory kind %d", backend.ErrInvalid, buf.Mem)
	}
	return nil
}

// usableLocked reports why a send to (or a receive from) rank peer
// cannot start. A rank that left can still be received from: in checked
// mode, the messages it announced before it left (matchRecvLocked refuses
// the others); otherwise any (a receive of a message it never sent then
// fails lostGrace later).
func (c *conn) usableLocked(peer int, recv bool) error {
	if c.fatal != nil {
		return c.fatal
	}
	if peer == c.rank {
		return nil
	}
	ch := sendChan(peer)
	if recv {
		ch = recvChan(peer)
	}
	if err := c.chans[ch].err; err != nil {
		return err
	}
	if p := &c.peers[peer]; p.lost != nil && !recv {
		return p.lost
	}
	return nil
}

// Isend implements backend.Conn. It queues the send and returns at once;
// the send reaches NCCL at the next wait, test or Done on this
// communicator. buf must not change until the request completes. A send to
// this rank itself is matched and copied at once and completes at once.
func (c *conn) Isend(buf backend.Buffer, dest, tag int, caller uintptr) (backend.Request, error) {
	if dest < 0 || dest >= c.size {
		return nil, fmt.Errorf("%w: rank %d is not in [0, %d)", backend.ErrInvalid, dest, c.size)
	}
	if err := c.validate(buf); err != nil {
		return nil, err
	}
	if tag < 0 && dest != c.rank {
		return c.internal(false, buf, dest, tag, caller)
	}
	r := newRequest(c, false, buf, dest, tag, caller)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trace != nil {
		c.trace.posted(time.Now())
	}
	if err := c.usableLocked(dest, false); err != nil {
		r.recycle()
		return nil, err
	}
	if dest == c.rank {
		if err := c.sendSelfLocked(r); err != nil {
			r.recycle()
			return nil, err
		}
		return r, nil
	}
	if c.check {
		p := &c.peers[dest]
		r.seq = p.sendSeq
		env := envelope{seq: r.seq, tag: int32(tag), typ: buf.Type, count: buf.Count}
		if err := c.ctl.sendEnvelope(dest, &env, &c.envOut); err != nil {
			r.recycle()
			return nil, err
		}
		p.sendSeq++
	}
	c.queue = append(c.queue, r)
	return r, nil
}

// Irecv implements backend.Conn. It queues the receive and returns at
// once. Without checks, the receive takes the next message from source
// that no earlier receive from source takes, whatever its tag (NCCL
// delivers in order and has no tags); with checks, the oldest message from
// source with its tag (match.go); from this rank itself, the oldest with
// its tag. AnySource and AnyTag are not supported.
func (c *conn) Irecv(buf backend.Buffer, source, tag int, caller uintptr) (backend.Request, error) {
	if source == backend.AnySource || tag == backend.AnyTag {
		return nil, fmt.Errorf("%w: the nccl backend cannot match AnySource or AnyTag: a receive must name its source and tag "+
			"(NCCL delivers each rank's messages in order; use the tcp backend for wildcards)",
			backend.ErrNotSupported)
	}
	if source < 0 || source >= c.size {
		return nil, fmt.Errorf("%w: rank %d is not in [0, %d)", backend.ErrInvalid, source, c.size)
	}
	if err := c.validate(buf); err != nil {
		return nil, err
	}
	if tag < 0 && source != c.rank {
		return c.internal(true, buf, source, tag, caller)
	}
	r := newRequest(c, true, buf, source, tag, caller)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trace != nil {
		c.trace.posted(time.Now())
	}
	if err := c.usableLocked(source, true); err != nil {
		r.recycle()
		return nil, err
	}
	if source == c.rank {
		c.recvSelfLocked(r)
		return r, nil
	}
	if c.check {
		if !c.matchRecvLocked(r) {
			err := c.peers[source].lost
			r.recycle()
			return nil, err
		}
		return r, nil
	}
	c.queue = append(c.queue, r)
	return r, nil
}

// internal sends or receives a message with a negative tag: the
// library's own traffic (mp's Barrier), which travels over the host
// connection and is matched there by tag. Kept off NCCL, it can never be
// taken by a user's receive posted before it, as it would be on a channel
// that delivers in order whatever the tags.
func (c *conn) internal(recv bool, buf backend.Buffer, peer, tag int, caller uintptr) (backend.Request, error) {
	c.mu.Lock()
	err := c.fatal
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if buf.Mem != backend.Host {
		return nil, fmt.Errorf("%w: messages with negative tags (the library's own) travel over the host connection and must be in host memory",
			backend.ErrNotSupported)
	}
	// The program's queued operations go to NCCL now: a rank about to
	// wait for the library's messages (a Barrier, a collective over
	// point-to-point) must not hold back a send its peers wait for first.
	c.poke()
	if recv {
		return c.ctl.tc.Irecv(buf, peer, tag, caller)
	}
	return c.ctl.tc.Isend(buf, peer, tag, caller)
}

// poke flushes the queue and polls the groups in flight, without blocking.
func (c *conn) poke() {
	c.mu.Lock()
	c.issueLocked()
	c.progressLocked()
	c.mu.Unlock()
}

// wait flushes the queue and waits for r to complete, at most timeout if
// positive. It polls from this goroutine for up to spinFor, then sleeps
// on r's Done channel while the progress goroutine polls.
func (c *conn) wait(r *request, timeout time.Duration) error {
	c.spinners.Add(1)
	spinning := true
	defer func() {
		if spinning {
			c.spinners.Add(-1)
			if c.busy.Load() {
				c.kick()
			}
		}
	}()
	if c.trace != nil {
		defer func() {
			now := time.Now()
			c.mu.Lock()
			c.trace.returned(now)
			c.mu.Unlock()
		}()
	}
	c.poke()
	if r.done.Load() {
		return nil
	}
	start := time.Now()
	now := start
	var deadline time.Time
	if timeout > 0 {
		deadline = start.Add(timeout)
	}
	for i := 1; !r.done.Load(); i++ {
		if i%spinClock == 0 {
			now = time.Now()
		}
		if timeout > 0 && !now.Before(deadline) {
			return fmt.Errorf("%w after %v", backend.ErrTimeout, timeout)
		}
		if now.Sub(start) < spinFor {
			if i%spinYield == 0 {
				runtime.Gosched()
			}
			c.mu.Lock()
			c.progressLocked()
			c.mu.Unlock()
			continue
		}
		// Sleep until completion, a deadline, or a periodic re-poll (a
		// safety net: the progress goroutine should see to everything).
		if spinning {
			spinning = false
			c.spinners.Add(-1)
		}
		c.kick()
		nap := 10 * time.Millisecond
		if timeout > 0 {
			nap = min(nap, deadline.Sub(now))
		}
		t := time.NewTimer(nap)
		select {
		case <-r.doneChan():
		case <-t.C:
		}
		t.Stop()
		c.poke()
		now = time.Now()
	}
	return nil
}

// kick wakes the progress goroutine.
func (c *conn) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run is the progress goroutine: while groups are in flight it polls
// them, backing off from minPoll to maxPoll, so that requests complete
// (and their Done channels close) while nobody waits in Wait.
func (c *conn) run() {
	defer c.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		}
		for delay := minPoll; ; delay = min(2*delay, maxPoll) {
			// While a waiter polls, polling here too would only contend
			// for the mutex (and delay the waiter): look again later.
			busy := true
			if c.spinners.Load() == 0 {
				c.mu.Lock()
				busy = c.progressLocked()
				c.mu.Unlock()
			} else {
				delay = maxPoll
			}
			if !busy {
				break
			}
			t.Reset(delay)
			select {
			case <-c.stop:
				return
			case <-c.wake:
				t.Stop()
				delay = minPoll / 2
			case <-t.C:
			}
		}
	}
}

// issueLocked hands the queued operations (sends, and receives without
// checks) to NCCL: one group per channel, each with the channel's queued
// operations in posting order. An operation stays queued (and so do the
// later ones of its channel, which must follow it) while its channel is
// still launching its last group.
func (c *conn) issueLocked() {
	if len(c.queue) == 0 {
		c.wantFlush = false
		return
	}
	c.wantFlush = true
	const (
		undecided = iota
		open
		blocked
	)
	kept := 0
	for _, r := range c.queue {
		ch := chanOf(r)
		if c.flushState[ch] == undecided {
			c.touched = append(c.touched, ch)
			c.flushState[ch] = blocked
			if !c.chans[ch].launching() && !(c.warming && ch == worldChan(c.size)) {
				c.flushState[ch] = open
				g := c.getGroup()
				g.ch = ch
				c.pick[ch] = g
			}
		}
		if hb := r.hostBytes(); c.flushState[ch] == open && hb > 0 {
			// Host memory is staged: past stageCap bytes of it on the
			// channel, the rest waits until earlier groups are done.
			if cur := c.stagedLocked(ch) + c.pick[ch].staged; cur > 0 && cur+hb > c.stageCap {
				c.flushState[ch] = blocked
			}
		}
		if c.flushState[ch] == blocked {
			c.queue[kept] = r
			kept++
			continue
		}
		c.prepareLocked(r, c.pick[ch])
	}
	clear(c.queue[kept:])
	c.queue = c.queue[:kept]
	if kept == 0 {
		c.wantFlush = false
	}
	for _, ch := range c.touched {
		c.flushState[ch] = undecided
		g := c.pick[ch]
		c.pick[ch] = nil
		switch {
		case g == nil:
		case len(g.ops) == 0:
			c.putGroup(g)
		default:
			c.launchLocked(g)
		}
	}
	c.touched = c.touched[:0]
}

// stagedLocked returns the bytes of host memory staged for the groups of
// channel ch on the GPU.
func (c *conn) stagedLocked(ch int) int64 {
	var n int64
	for _, g := range c.chans[ch].inflight {
		n += g.staged
	}
	return n
}

// prepareLocked adds the op of queued request r to g, and sets the status
// it will complete with.
func (c *conn) prepareLocked(r *request, g *group) {
	r.stage = stageIssued
	if r.coll != 0 {
		r.st = backend.Status{Source: c.rank, Tag: -1, Count: r.recvBuf.Count}
		g.staged += r.hostBytes()
		g.ops = append(g.ops, op{r: r, peer: -1, buf: r.buf, typ: r.buf.Type, count: r.buf.Count,
			coll: r.coll, buf2: r.recvBuf, redop: r.op, root: r.root})
		return
	}
	o := op{r: r, recv: r.recv, peer: r.peer, buf: r.buf, typ: r.buf.Type, count: r.buf.Count}
	if r.recv {
		r.st = backend.Status{Source: r.peer, Tag: r.tag, Count: r.buf.Count}
	} else {
		r.st = backend.Status{Source: c.rank, Tag: r.tag, Count: r.buf.Count}
	}
	if o.bytes() == 0 {
		if c.check {
			// Its envelope says it all: the receive completes when it
			// matches it (match.go), and NCCL is not involved.
			r.complete(r.st, nil)
			return
		}
		// Without checks an empty message still pairs its send with its
		// receive (a receive must not complete before the send was
		// posted): it moves a one-byte token.
		o.token, o.typ, o.count = true, backend.Uint8, 1
	}
	if r.buf.Mem == backend.Host {
		g.staged += o.bytes()
	}
	g.ops = append(g.ops, o)
}

// launchLocked issues g and records it in flight on its channel.
func (c *conn) launchLocked(g *group) {
	ch := &c.chans[g.ch]
	if c.trace != nil {
		g.t0 = time.Now()
		c.trace.launched(g.t0)
	}
	inProgress, err := c.eng.launch(g)
	if c.trace != nil {
		g.t1 = time.Now()
	}
	ch.inflight = append(ch.inflight, g)
	if err != nil {
		c.failChanLocked(g.ch, err)
		return
	}
	if inProgress {
		g.launching = true
	} else {
		c.sealLocked(g)
	}
	// A waiter polling now sees to it (and wakes the progress goroutine
	// when it leaves with work in flight): waking it here would only take
	// the CPU from the waiter (with one core per rank, as mpirun binds).
	c.busy.Store(true)
	if c.spinners.Load() == 0 {
		c.kick()
	}
}

// sealLocked has the engine queue what follows g, and its seal.
func (c *conn) sealLocked(g *group) {
	if err := c.eng.seal(g); err != nil {
		c.failChanLocked(g.ch, err)
		return
	}
	g.sealed = true
	if c.trace != nil {
		g.t2 = time.Now()
	}
}

// progressLocked advances every channel: a launching group is sealed once
// NCCL has it on the stream, finished groups complete their requests, and
// a wanted flush is retried. It reports whether work is still in flight
// (the progress goroutine polls while it is).
func (c *conn) progressLocked() bool {
	busy := false
	for i := range c.chans {
		if len(c.chans[i].inflight) > 0 {
			c.progressChanLocked(i)
			busy = busy || len(c.chans[i].inflight) > 0
		}
	}
	for p := range c.peers {
		if c.peers[p].issueWanted {
			c.issueRecvsLocked(p)
		}
	}
	c.busy.Store(busy)
	if c.wantFlush && len(c.queue) > 0 {
		c.issueLocked() // launches set busy
	}
	return c.busy.Load()
}

// progressChanLocked advances channel i.
func (c *conn) progressChanLocked(i int) {
	ch := &c.chans[i]
	// ncclCommGetAsyncError: whether the last launch is on the stream yet,
	// and any failure NCCL found in its own threads. Asked at every poll
	// while a launch is in progress, otherwise every asyncCheckPolls polls:
	// a waiter polls in a tight loop, and NCCL's own threads need the
	// communicator meanwhile.
	launching := ch.launching()
	inProgress := false
	if ch.sinceCheck++; launching || ch.sinceCheck >= asyncCheckPolls {
		ch.sinceCheck = 0
		var err error
		inProgress, err = c.eng.settle(i)
		if err != nil {
			c.failChanLocked(i, err)
			return
		}
	}
	if last := ch.inflight[len(ch.inflight)-1]; last.launching && !inProgress {
		last.launching = false
		c.sealLocked(last)
		if len(ch.inflight) == 0 {
			return
		}
	}
	for len(ch.inflight) > 0 {
		g := ch.inflight[0]
		if !g.sealed {
			break
		}
		done, err := c.eng.poll(g)
		g.polls++
		if err != nil {
			c.failChanLocked(i, err)
			return
		}
		if !done {
			break
		}
		ch.graceUntil = time.Time{}
		copy(ch.inflight, ch.inflight[1:])
		ch.inflight[len(ch.inflight)-1] = nil
		ch.inflight = ch.inflight[:len(ch.inflight)-1]
		if c.trace != nil {
			c.trace.add(g, time.Now())
		}
		c.eng.finish(g)
		for j := range g.ops {
			if r := g.ops[j].r; r != nil {
				r.complete(r.st, r.verdict)
			} else if m := g.ops[j].early; m != nil {
				c.landedLocked(m)
			} else {
				c.connecting-- // first contact (connectAll)
			}
		}
		c.putGroup(g)
	}
	// A channel whose peer is gone gets lostGrace after its last progress
	// to finish what is on the GPU: the peer delivered what it sent before
	// it left, and a receive of anything else never completes.
	if lost := c.lostOfLocked(i); lost != nil && len(ch.inflight) > 0 {
		now := time.Now()
		switch {
		case ch.graceUntil.IsZero():
			ch.graceUntil = now.Add(lostGrace)
		case now.After(ch.graceUntil):
			c.failChanLocked(i, fmt.Errorf("%w (its operations on the GPU did not finish within %v; the channel was aborted)", lost, lostGrace))
		}
	}
}

// lostOfLocked returns why channel i's peer is gone (for the channel of
// all ranks, the first rank found gone), or nil.
func (c *conn) lostOfLocked(i int) error {
	if i != worldChan(c.size) {
		return c.peers[chanPeer(i)].lost
	}
	for p := range c.peers {
		if c.peers[p].lost != nil {
			return c.peers[p].lost
		}
	}
	return nil
}

// getGroup takes a group from the free list.
func (c *conn) getGroup() *group {
	if n := len(c.groups); n > 0 {
		g := c.groups[n-1]
		c.groups = c.groups[:n-1]
		return g
	}
	return new(group)
}

// putGroup returns g to the free list.
func (c *conn) putGroup(g *group) {
	g.reset()
	c.groups = append(c.groups, g)
}

// failChanLocked ends channel i after an error that leaves its state
// unknown (an NCCL or CUDA error, a rank lost with operations on the GPU):
// its queued operations fail at once, and its NCCL communicator is aborted
// on a goroutine of its own (abortChan), outside the mutex: ncclCommAbort
// can take a while, and may need the peer to abort its side too, which
// must not wait for this rank's mutex. The operations that were on the
// GPU fail once the abort has returned, when the GPU no longer uses their
// buffers. Later operations on the channel fail with err. Other channels
// go on. Once Close has begun, engine.close aborts every channel, and
// failChanLocked only fails the operations.
func (c *conn) failChanLocked(i int, err error) {
	ch := &c.chans[i]
	first := ch.err == nil
	if first {
		ch.err = err
	}
	err = ch.err
	if first && i == worldChan(c.size) && c.warming {
		// Not aborted while startWarm's call may be in NCCL: it aborts
		// once that has returned.
		c.quitWarmLocked()
	} else if first && !c.closing {
		if abort := c.eng.detach(i); abort != nil {
			groups := ch.inflight
			ch.inflight = nil
			c.aborts.Add(1)
			go c.abortChan(abort, groups, err)
		}
	}
	c.failGroupsLocked(ch.inflight, err, true)
	clear(ch.inflight)
	ch.inflight = ch.inflight[:0]
	if i == recvChan(chanPeer(i)) {
		c.failRecvsLocked(chanPeer(i), err, true)
	}
	kept := c.queue[:0]
	for _, r := range c.queue {
		if chanOf(r) == i {
			r.fail(err)
		} else {
			kept = append(kept, r)
		}
	}
	clear(c.queue[len(kept):])
	c.queue = kept
}

// abortChan aborts a channel's NCCL communicator (abort, from
// engine.detach, is bounded by abortBound), then fails the operations that
// were on the GPU. If the abort did not return in time, the GPU may still
// use the groups' memory: their requests fail with an error that says so,
// and their staging memory is not reused.
func (c *conn) abortChan(abort func() error, groups []*group, err error) {
	defer c.aborts.Done()
	aerr := abort()
	c.mu.Lock()
	defer c.mu.Unlock()
	if aerr != nil {
		err = fmt.Errorf("%w (and ncclCommAbort failed: %v)", err, aerr)
	}
	c.failGroupsLocked(groups, err, aerr == nil || !errors.Is(aerr, errAbortStuck))
	c.kick()
}

// failGroupsLocked fails the requests of groups taken off the GPU, and
// gives back their resources (release) or, when the GPU may still use
// them, leaves them.
func (c *conn) failGroupsLocked(groups []*group, err error, release bool) {
	for _, g := range groups {
		for j := range g.ops {
			o := &g.ops[j]
			if o.r != nil {
				o.r.fail(err)
			}
			if m := o.early; m != nil {
				if m.r != nil {
					m.r.fail(err)
				}
				if m.tmp != nil && release {
					c.eng.freeTemp(m.tmp)
				}
				m.tmp = nil
			}
		}
		if release {
			c.eng.release(g)
			c.putGroup(g)
		}
	}
}

// failAllLocked aborts every channel and fails every operation, NCCL's and
// this rank's own, with err.
func (c *conn) failAllLocked(err error) {
	for i := range c.chans {
		if chanPeer(i) != c.rank {
			c.failChanLocked(i, err)
		}
	}
	for _, r := range c.queue { // none should be left: every op has a channel
		r.fail(err)
	}
	clear(c.queue)
	c.queue = c.queue[:0]
	c.wantFlush = false
	for p := range c.peers {
		c.failRecvsLocked(p, err, true)
	}
	c.self.fail(err)
}

// peerLost records that rank p is gone (its host connection ended: it
// closed, aborted, or its process died). Queued sends to it fail at once.
// Receives of what it sent before it left may still complete: in checked
// mode those whose envelope came go on and the others fail at once;
// without checks every receive goes on. Operations on the GPU with it get
// lostGrace after their last progress to finish, after which their
// channel is aborted.
func (c *conn) peerLost(p int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.fatal != nil || c.peers[p].lost != nil {
		return
	}
	if !errors.Is(err, backend.ErrPeerLost) {
		err = fmt.Errorf("%w: rank %d: %w", backend.ErrPeerLost, p, err)
	}
	c.peers[p].lost = err
	kept := c.queue[:0]
	for _, r := range c.queue {
		if r.peer == p && !r.recv {
			r.fail(err)
		} else {
			kept = append(kept, r)
		}
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	// Checked: every message p sent was announced before it left; the
	// receives that matched none never will.
	c.failRecvsLocked(p, err, false)
	if !errors.Is(err, backend.ErrPeerClosed) {
		// p aborted, or its process vanished: what it had not delivered
		// never will be, and its side of the channels is being torn down
		// (an abort of p's may wait until this rank aborts its side).
		c.failChanLocked(sendChan(p), err)
		c.failChanLocked(recvChan(p), err)
		if c.world {
			c.failChanLocked(worldChan(c.size), err)
		}
	}
	c.kick()
}

// Pending implements backend.Conn.
func (c *conn) Pending() []backend.OpInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []backend.OpInfo
	for i := range c.chans {
		for _, g := range c.chans[i].inflight {
			for j := range g.ops {
				r := g.ops[j].r
				if m := g.ops[j].early; m != nil {
					r = m.r
				}
				if r != nil && r.stage != stageDone {
					out = append(out, r.info())
				}
			}
		}
	}
	for _, r := range c.queue {
		out = append(out, r.info())
	}
	for p := range c.peers {
		out = c.peers[p].pendingRecvs(out)
	}
	out = append(out, c.self.pending()...)
	if c.ctl != nil {
		for _, o := range c.ctl.tc.Pending() {
			if o.Tag < 0 { // the library's own; the others are envelopes
				out = append(out, o)
			}
		}
	}
	return out
}

// Abort implements backend.Conn: every pending and future operation ends
// with err, the other ranks learn that this rank is gone (first, so that
// they abort their side of the channels), and every channel is aborted
// (ncclCommAbort, all at once, each bounded by abortBound). When
// Abort returns, the GPU no longer uses the buffers of pending operations
// (unless an abort did not return in time; their requests say so).
func (c *conn) Abort(err error) {
	c.mu.Lock()
	if c.fatal == nil {
		c.fatal = err
	}
	err = c.fatal
	c.mu.Unlock()
	if c.ctl != nil {
		c.ctl.abort(err)
	}
	c.mu.Lock()
	c.failAllLocked(err)
	c.mu.Unlock()
	c.aborts.Wait()
}

// Close implements backend.Conn. Pending operations end with ErrClosed,
// and every later one fails with it. The host connection says goodbye to
// the other ranks and waits (up to the tcp backend's linger time) for
// theirs; then every channel is aborted (ncclCommAbort, all at once: see
// engine.close for why not ncclCommFinalize), which also stops whatever
// was still on the GPU, so no buffer is used after Close returns. The
// communicator's goroutines have ended when Close returns.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		if c.fatal == nil {
			c.fatal = backend.ErrClosed
		}
		for i := range c.chans {
			// Closed, not failed: engine.close aborts them all at once.
			if c.chans[i].err == nil {
				c.chans[i].err = c.fatal
			}
		}
		c.failAllLocked(c.fatal)
		c.mu.Unlock()
		var errs []error
		if c.ctl != nil {
			if err := c.ctl.close(); err != nil {
				errs = append(errs, err)
			}
		}
		close(c.stop)
		if err := c.stopWarm(); err != nil {
			errs = append(errs, err)
		}
		c.wg.Wait()
		c.aborts.Wait()
		if err := c.eng.close(); err != nil {
			errs = append(errs, err)
		}
		c.closeErr = errors.Join(errs...)
		if c.trace != nil {
			c.trace.report(c.rank)
		}
	})
	return c.closeErr
}

// connectAll connects every channel before any user traffic: each rank
// sends one byte on each of its send channels and receives one on each of
// its receive channels, all at once, and waits for them (bounded by ctx).
// ops(p) gives the send to and the receive from rank p.
//
// NCCL sets a connection up lazily, inside the first operation that needs
// it, and that setup needs the peer (measured with NCCL 2.28.3: rank 0
// grouping a send and a receive while rank 1 receives, then sends, hangs
// as the pair's first traffic, and works after one symmetric exchange);
// doing it here keeps it out of the first user operation, whose wait would
// then include it. A rank has 2(N−1) channels, each an NCCL communicator of two
// ranks with its own connection buffers: right for the one or few hosts
// courier runs on today; a job of hundreds of ranks would need channels
// made on first use instead.
func (c *conn) connectAll(ctx context.Context, ops func(p int) (send, recv op)) error {
	if c.size == 1 {
		return nil
	}
	c.mu.Lock()
	for p := range c.size {
		if p == c.rank {
			continue
		}
		s, r := ops(p)
		c.connecting += 2
		for _, o := range []op{s, r} {
			g := c.getGroup()
			g.ch = sendChan(p)
			if o.recv {
				g.ch = recvChan(p)
			}
			g.ops = append(g.ops, o)
			c.launchLocked(g)
		}
	}
	c.mu.Unlock()
	for delay := time.Microsecond; ; delay = min(2*delay, time.Millisecond) {
		c.mu.Lock()
		c.progressLocked()
		// Only first contact counts: a peer that has connected may have
		// sent this rank a message already (an early receive of checked
		// mode), which completes only once the peer flushes it.
		busy := c.connecting > 0
		var err error
		for i := range c.chans {
			if err = c.chans[i].err; err != nil {
				break
			}
		}
		c.mu.Unlock()
		if err != nil {
			return fmt.Errorf("nccl: connecting the ranks: %w", err)
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nccl: connecting the ranks (a one-byte message on every channel) did not finish: %w", ctx.Err())
		case <-time.After(delay):
		}
	}
}

// Device returns the CUDA device ordinal of this rank's GPU (mp's
// Comm.Device).
func (c *conn) Device() int { return c.dev }

// traceStats sums where the time of each group goes, for the groups of
// sends and those of receives apart: the launch call, and NCCL's share of
// it (ncclGroupStart to ncclGroupEnd; the rest is staging, the context's
// push and pop, and cgo), from its return until NCCL has the group on the
// stream (ncclInProgress, then settled), and from there until its event
// fires and progress sees it (and how many queries that took); and the
// time from one group's completion to the next launch on the rank (the
// program and courier between two operations). Set COURIER_NCCL_TRACE=1
// to have Close print them.
type traceStats struct {
	dir     [2]traceDir // sends, receives
	gaps    int64
	gap     time.Duration
	lastEnd time.Time
	// The gap in three: from the completion to Wait's return, from there
	// to the next Isend or Irecv, and from there to the launch.
	lastRet, lastPost time.Time
	toRet, toPost     time.Duration
	toLaunch          time.Duration
	split             int64
}

// returned notes that a wait returned now; posted, that an operation was
// posted now.
func (t *traceStats) returned(now time.Time) {
	if t.lastRet.IsZero() {
		t.lastRet = now
	}
}

func (t *traceStats) posted(now time.Time) {
	if t.lastPost.IsZero() {
		t.lastPost = now
	}
}

type traceDir struct {
	n                              int64
	launch, nccl, settle, complete time.Duration
	polls                          int64
}

// launched notes that a group is being launched now.
func (t *traceStats) launched(now time.Time) {
	if !t.lastEnd.IsZero() {
		t.gaps++
		t.gap += now.Sub(t.lastEnd)
		if r, p := t.lastRet, t.lastPost; !r.Before(t.lastEnd) && !p.Before(r) && !now.Before(p) {
			t.split++
			t.toRet += r.Sub(t.lastEnd)
			t.toPost += p.Sub(r)
			t.toLaunch += now.Sub(p)
		}
		t.lastEnd = time.Time{}
	}
	t.lastRet, t.lastPost = time.Time{}, time.Time{}
}

func (t *traceStats) add(g *group, done time.Time) {
	t.lastEnd = done
	t.lastRet, t.lastPost = time.Time{}, time.Time{}
	if g.t0.IsZero() || g.t2.IsZero() {
		return
	}
	d := &t.dir[g.ch%2]
	d.n++
	d.launch += g.t1.Sub(g.t0)
	d.nccl += g.nccl
	d.settle += g.t2.Sub(g.t1)
	d.complete += done.Sub(g.t2)
	d.polls += g.polls
}

func (t *traceStats) report(rank int) {
	for i, d := range t.dir {
		if d.n == 0 {
			continue
		}
		n := time.Duration(d.n)
		fmt.Fprintf(os.Stderr, "courier nccl trace: rank %d: %d groups of %s; mean launch %v (NCCL's calls %v), until on the stream %v, until seen done %v (%.1f queries)\n",
			rank, d.n, [2]string{"sends", "receives"}[i], d.launch/n, d.nccl/n, d.settle/n, d.complete/n, float64(d.polls)/float64(d.n))
	}
	if t.gaps > 0 {
		fmt.Fprintf(os.Stderr, "courier nccl trace: rank %d: mean time from a group's completion to the next launch: %v (%d times)\n",
			rank, t.gap/time.Duration(t.gaps), t.gaps)
	}
	if t.split > 0 {
		n := time.Duration(t.split)
		fmt.Fprintf(os.Stderr, "courier nccl trace: rank %d: of which until Wait returned %v, then until the next post %v, then until its launch %v (%d times)\n",
			rank, t.toRet/n, t.toPost/n, t.toLaunch/n, t.split)
	}
}
