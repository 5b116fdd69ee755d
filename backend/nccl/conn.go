package nccl

import (
	"sync"
	"sync/atomic"

	"github.com/courier-mp/courier/backend"
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
	ipc        *ipcPath // the ranks that share this rank's GPU (ipc.go); nil if none
	// world: the engine has a communicator of every rank, on channel
	// worldChan(size), which runs the collectives (Collective).
	world bool
	// derive makes the communicators derived from this one (split.go);
	// fam lists them, and this one (family.go).
	derive deriveFunc
	fam    *family

	mu        sync.Mutex
	queue     []*request // posted, not yet issued, in posting order
	chans     []channel  // by channel number; those of this rank itself are unused
	wantFlush bool       // a wait, test or Done asked for the queue to be issued
	fatal     error      // set by Close or Abort: every new operation fails with it
	revoked   error      // set by Revoke (shrink.go): every new operation but the agreement's fails with it
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
	aborts    abortGroup // channel aborts in flight (abortChan)
	closeOnce sync.Once
	closeErr  error
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
	derive     deriveFunc // makes derived communicators (Split); nil: none
	fam        *family    // the family of the parent (nil: a new one)
	ipc        *ipcPath   // the IPC path, if any rank shares this rank's GPU
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
		ipc:        o.ipc,
		world:      o.world,
		derive:     o.derive,
		fam:        o.fam,
		chans:      make([]channel, 2*o.size+1),
		peers:      make([]peer, o.size),
		pick:       make([]*group, 2*o.size+1),
		flushState: make([]uint8, 2*o.size+1),
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		trace:      o.trace,
		stageCap:   stageCap,
	}
	if c.fam == nil {
		c.fam = &family{}
	}
	c.fam.join(c)
	c.wg.Add(1)
	go c.run()
	if c.ctl != nil {
		for p := range c.size {
			if p != c.rank {
				c.wg.Add(1)
				go c.ctl.read(c, p)
			}
		}
		c.startIPC()
	}
	return c
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
	out = c.ipcPendingLocked(out)
	if c.ctl != nil {
		for _, o := range c.ctl.tc.Pending() {
			if o.Tag < 0 { // the library's own; the others are envelopes
				out = append(out, o)
			}
		}
	}
	return out
}

// Device returns the CUDA device ordinal of this rank's GPU (mp's
// Comm.Device).
func (c *conn) Device() int { return c.dev }
