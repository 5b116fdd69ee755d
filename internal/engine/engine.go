package engine

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
)

// Engine is one rank's point-to-point layer over its links: MPI matching
// (posted and unexpected queues, wildcards, non-overtaking), the eager and
// rendezvous protocols, checks, probe, failure and the pending report. It
// implements backend.Conn, backend.Prober and backend.Splitter for the
// communicator of every rank (the world); the communicators derived from it
// (Split) share its links and have queues of their own (comm.go).
type Engine struct {
	rank, size int
	check      bool
	peers      []*Peer // nil at rank
	pollers    []Poller
	yield      bool // ranks outnumber cores: spinners yield the core
	crowded    bool // ranks outnumber this process's Ps (GOMAXPROCS)

	mu       sync.Mutex
	world    *Comm               // communicator 0: every rank, ranks as the job's
	comms    map[uint32]*Comm    // the derived communicators by id, and placeholders for early arrivals
	gone     map[uint32]bool     // ids of derived communicators closed here: never used again
	inflight map[uint64]*request // rendezvous under way, by id (of every communicator)
	discard  map[uint64]owed     // DATA still due for receives a derived communicator's close ended, by id
	nextID   uint64
	fatal    error                             // set by Close or Abort: every new operation fails with it
	dead     atomic.Pointer[error]             // fatal, for paths that do not take mu
	cause    atomic.Pointer[backend.LostError] // the first rank lost by failure (failure.go): named in BYE

	closeOnce sync.Once
	closing   atomic.Bool
	linger    time.Duration
	wg        sync.WaitGroup // the links' goroutines

	asks asks // questions for the other ranks' reports (ask.go)

	spare atomic.Pointer[request] // a released request, for the next one (request.go)
}

// Options configures New.
type Options struct {
	Rank, Size int
	// Check turns on the strict checks of COURIER_CHECK=1.
	Check bool
	// Linger bounds Close's wait for peers to say goodbye.
	Linger time.Duration
	// LocalRanks is the number of ranks of the job on this host (0:
	// unknown); spinning waiters yield the core when it exceeds the
	// number of CPUs this process may run on.
	LocalRanks int
}

// outnumber reports whether ranks ranks of a host, this one allowed mine
// of its host CPUs, must share cores: more ranks than the host has CPUs,
// or, where a launcher bound each rank to a set of its own (mpirun binds
// each to a core), more than sets of this one's size that fit. A rank
// bound to a core of its own does not yield it: a sched_yield per poll
// there gave the core to the rank's other threads for whole time slices
// (an 8-byte message over the CUDA IPC path took 35 ms, against 0.3).
// host is 0 when unknown: mine stands for it.
func outnumber(ranks, mine, host int) bool {
	if host < mine {
		host = mine
	}
	if mine == host {
		return ranks > host
	}
	return ranks*mine > host
}

// DefaultLinger bounds how long Close waits for peers to acknowledge the
// end of their links before it ends them anyway.
const DefaultLinger = 2 * time.Second

// New makes an engine with no links; Attach them, then Start.
func New(o Options) (*Engine, error) {
	if o.Size < 1 || o.Rank < 0 || o.Rank >= o.Size {
		return nil, fmt.Errorf("%w: rank %d of %d", backend.ErrInvalid, o.Rank, o.Size)
	}
	e := &Engine{
		rank:     o.Rank,
		size:     o.Size,
		check:    o.Check,
		peers:    make([]*Peer, o.Size),
		comms:    make(map[uint32]*Comm),
		gone:     make(map[uint32]bool),
		inflight: make(map[uint64]*request),
		discard:  make(map[uint64]owed),
		nextID:   1,
		linger:   o.Linger,
		yield:    outnumber(o.LocalRanks, runtime.NumCPU(), hostCPUs()),
		crowded:  o.LocalRanks > runtime.GOMAXPROCS(0),
	}
	if e.linger <= 0 {
		e.linger = DefaultLinger
	}
	e.world = &Comm{e: e, rank: o.Rank, size: o.Size, joined: true}
	engines.Add(1)
	return e, nil
}

// Rank is the engine's own rank.
func (e *Engine) Rank() int { return e.rank }

// Size is the number of ranks.
func (e *Engine) Size() int { return e.size }

// Attach gives the engine its link to rank and returns the peer the link
// reports to. Call it for every other rank before any traffic.
func (e *Engine) Attach(rank int, l Link) *Peer {
	p := &Peer{e: e, rank: rank, link: l, eager: min(l.EagerLimit(), EagerLimit)}
	p.puller, _ = l.(Puller)
	e.peers[rank] = p
	return p
}

// AddPoller registers a transport whose arrivals waiting goroutines poll.
func (e *Engine) AddPoller(p Poller) { e.pollers = append(e.pollers, p) }

// Go runs f as one of the engine's goroutines: Close and Abort wait for it
// to return.
func (e *Engine) Go(f func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
}

// Err returns the error every operation fails with once Close or Abort
// has begun, or nil.
func (e *Engine) Err() error {
	if err := e.dead.Load(); err != nil {
		return *err
	}
	return nil
}

// Closing reports whether Close has begun.
func (e *Engine) Closing() bool { return e.closing.Load() }

// Missing returns an error naming the first rank other than this one
// without a link, or nil.
func (e *Engine) Missing() error {
	for j, p := range e.peers {
		if j != e.rank && p == nil {
			return fmt.Errorf("%w: no link to rank %d", backend.ErrInvalid, j)
		}
	}
	return nil
}

// Close implements backend.Conn: pending operations end with ErrClosed
// (those of the derived communicators too, which end with the engine),
// each peer is sent BYE, and Close waits (up to the linger time) for the
// peers to finish their links before it ends them and joins their
// goroutines.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		engines.Add(-1)
		e.closing.Store(true)
		e.failAll(backend.ErrClosed)
		dl := time.Now().Add(e.linger)
		for _, p := range e.peers {
			if p != nil {
				p.link.Goodbye(dl)
			}
		}
		done := make(chan struct{})
		go func() { e.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(e.linger + time.Second):
		}
		for _, p := range e.peers {
			if p != nil {
				p.link.Kill(false)
			}
		}
		<-done
		e.asks.closeAsks()
	})
	return nil
}

// Abort implements backend.Conn: every operation of every communicator of
// the engine ends with err.
func (e *Engine) Abort(err error) {
	e.failAll(err)
	e.asks.drain(answerDrain)
	for _, p := range e.peers {
		if p != nil {
			p.link.Kill(true)
		}
	}
}

// Link returns the link to rank j: nil for this rank, or for a rank out
// of range or not attached.
func (e *Engine) Link(j int) Link {
	if j < 0 || j >= e.size || e.peers[j] == nil {
		return nil
	}
	return e.peers[j].link
}

// Transport names what carries messages to rank j: "self" for this rank,
// else the link's own name ("tcp", "shm").
func (e *Engine) Transport(j int) string {
	if j == e.rank {
		return "self"
	}
	if j < 0 || j >= e.size || e.peers[j] == nil {
		return ""
	}
	if n, ok := e.peers[j].link.(interface{ Transport() string }); ok {
		return n.Transport()
	}
	return "?"
}

// Isend implements backend.Conn on the world.
func (e *Engine) Isend(buf backend.Buffer, dest, tag int, caller uintptr) (backend.Request, error) {
	return e.world.Isend(buf, dest, tag, caller)
}

// Send implements backend.Sender on the world.
func (e *Engine) Send(buf backend.Buffer, dest, tag int, caller uintptr) (bool, error) {
	return e.world.Send(buf, dest, tag, caller)
}

// Irecv implements backend.Conn on the world.
func (e *Engine) Irecv(buf backend.Buffer, source, tag int, caller uintptr) (backend.Request, error) {
	return e.world.Irecv(buf, source, tag, caller)
}

// Pending implements backend.Conn: the world's operations (each derived
// communicator reports its own).
func (e *Engine) Pending() []backend.OpInfo { return e.world.Pending() }

// Iprobe implements backend.Prober on the world.
func (e *Engine) Iprobe(source, tag int) (bool, backend.Status, error) {
	return e.world.Iprobe(source, tag)
}

// Split implements backend.Splitter: a communicator derived from the
// world (Comm.Split).
func (e *Engine) Split(id uint32, members []int) (backend.Conn, error) {
	return e.world.Split(id, members)
}
