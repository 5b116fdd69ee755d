package mp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
	_ "github.com/courier-mp/courier/backend/tcp" // registers "tcp" and "host"
	"github.com/courier-mp/courier/bootstrap"
)

// AnySource and AnyTag are the wildcards of a receive: match a message from
// any rank, or with any tag. AnyTag matches every tag a user can send (tags
// are non-negative). The NCCL backend cannot match wildcards and reports
// ErrNotSupported.
const (
	AnySource = backend.AnySource
	AnyTag    = backend.AnyTag
)

// MaxTag is the largest tag a message may carry; tags are in [0, MaxTag].
const MaxTag = backend.MaxTag

// Status describes a completed operation. Recv, Wait, Probe and the other
// calls that complete a receive return it; for a send, Source is the
// sender's own rank, Tag the send's tag and Count the number of elements
// sent. A Status is a plain value: keep it, compare it, copy it.
type Status struct {
	// Source is the rank that sent the message: the matched rank when the
	// receive named AnySource.
	Source int
	// Tag is the message's tag: the matched tag when the receive named
	// AnyTag.
	Tag int
	// Count is how many elements the message held, in the receive
	// buffer's element type. After ErrTruncate it is the message's count,
	// which is larger than the buffer, so the caller can size one.
	Count int64
}

// statusOf converts a transport's status; the two types have one layout,
// so the conversion is free.
func statusOf(st backend.Status) Status { return Status(st) }

// Comm is a communicator: this process's endpoint among Size ranks. Init
// returns the one of every rank of the job (the world); Split and Dup
// derive others from it, each with its own ranks, tags and collectives
// (split.go).
//
// A Comm is safe for concurrent use by several goroutines. Messages sent
// from one goroutine to one peer with one tag arrive in order; messages sent
// concurrently from several goroutines have no order between them.
type Comm struct {
	conn        backend.Conn
	sender      backend.Sender // conn's, when it has one: blocking sends in one call
	rank, size  int
	backendName string
	timeout     time.Duration
	watchdog    time.Duration // the watchdog's period, zero: off (watchdog.go)
	waits       waitCounts
	check       bool
	guard       bool // COURIER_CHECK=2: send buffers checked for changes (guard.go)
	job         backend.Job
	env         func(string) string
	cores       bool      // Init changed GOMAXPROCS for it (cores.go)
	spare       bool      // the ranks of this host leave some of its cores idle (cores.go)
	tr          *recorder // the timeline (trace.go); nil: none is recorded

	// The collectives of device buffers that courier runs itself: on the
	// device or staged (COURIER_DEVICE_COLL), and the device side's
	// streams and scratch memory (colldevice.go).
	devMode devCollMode
	dev     devColl

	// order lets one collective (or Barrier) of this rank run at a
	// time, in their start order, blocking and non-blocking (icoll.go):
	// their messages share one tag. collPC, written in a collective's
	// turn, is the program's call of the one running (its messages report
	// it).
	order    collOrder
	collPC   uintptr
	collCall atomic.Uint32 // what the program called, for reports (report.go)

	// The communicator's place among those derived from one world
	// (split.go): its id (0 for the world), its name, the one it was
	// derived from (nil for the world), the family, and its count of
	// Split and Dup calls.
	id     uint32
	name   string
	parent *Comm
	fam    *family
	splits atomic.Uint64

	// The world's answer to the other ranks' questions once one of its
	// waits (or a derived communicator's) has timed out (jobreport.go).
	answer atomic.Pointer[answer]

	// Shrink (shrink.go): its calls on this communicator, one at a time;
	// whether one has begun (the communicator is revoked) and whether
	// one returned a communicator.
	shrinkMu  sync.Mutex
	shrinks   atomic.Uint64
	revoked   atomic.Bool
	shrunk    bool
	agreement *agreement // under shrinkMu

	closeOnce sync.Once
	closeErr  error
}

// Option configures Init. Options override the environment variables.
type Option func(*config)

type config struct {
	backend    string
	timeout    time.Duration
	timeoutSet bool
	watchdog   time.Duration
	dogSet     bool
	check      *bool
	guard      bool  // COURIER_CHECK=2: send buffers checked for changes (guard.go)
	guardOpt   *bool // WithSendBufferCheck
	job        *bootstrap.Job
	env        func(string) string
	envSet     bool // WithEnv: the process environment is not read
	devMode    devCollMode
	trace      string // COURIER_TRACE or WithTrace: the trace's file ("": none)
	traceSet   bool   // WithTrace
}

// WithBackend selects the backend by name ("host", "tcp", "nccl", "auto"),
// overriding COURIER_BACKEND.
func WithBackend(name string) Option { return func(c *config) { c.backend = name } }

// WithTimeout bounds every wait on the communicator (and Init itself),
// overriding COURIER_TIMEOUT. Zero means no bound. When a wait passes the
// bound, the communicator is aborted and every pending request ends with an
// error matching ErrTimeout that lists this rank's pending operations.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout, c.timeoutSet = d, true }
}

// WithCheck turns envelope checks on or off, overriding COURIER_CHECK.
func WithCheck(on bool) Option { return func(c *config) { c.check = &on } }

// WithSendBufferCheck turns the send-buffer check on or off, overriding
// COURIER_CHECK=2's: every Isend's host buffer is checksummed at the call
// and at the send's completion, and a buffer the program changed
// meanwhile fails the send with an error matching ErrModified. It costs
// two passes over every byte sent (docs/benchmarks.md): a setting for
// finding the mistake.
func WithSendBufferCheck(on bool) Option { return func(c *config) { c.guardOpt = &on } }

// WithJob gives the launch explicitly (rank, size, rendezvous address)
// instead of reading it from the launcher's environment. The in-process test
// harness uses it to run several ranks in one process.
func WithJob(job bootstrap.Job) Option { return func(c *config) { c.job = &job } }

// WithEnv makes Init read its configuration variables through getenv instead
// of the process environment.
func WithEnv(getenv func(string) string) Option {
	return func(c *config) { c.env, c.envSet = getenv, true }
}

// Init joins the job this process was launched in and returns its
// communicator. It reads the launcher's environment (courier run, mpirun,
// srun, or COURIER_RANK/SIZE/ADDR by hand) and COURIER_BACKEND, meets the
// other ranks and connects to them. ctx bounds this bootstrap only; it is
// not kept.
//
// Init blocks until every rank has joined. It fails, never hangs, when a
// rank does not come: at the latest after ctx's deadline, COURIER_TIMEOUT,
// or DefaultInitTimeout.
//
// A misspelt setting fails Init rather than being ignored: an unknown
// COURIER_BACKEND value that is close to a backend's name, or a
// COURIER_ variable courier does not read whose name is within two
// letters of one it does (COURIER_BACKNED), is an error wrapping
// ErrNotSupported or ErrInvalid that says what was probably meant. Other
// unknown COURIER_ variables are ignored. (With WithEnv the process
// environment is not read, so its names are not checked.)
//
// A process may call Init more than once, one after another or several at
// once, under every launcher: each call returns a communicator of its own
// over all the ranks. The calls of a process are numbered in the order
// they are made, and the ranks' first calls meet each other, their second
// calls each other, and so on; their rendezvous run one at a time, in that
// order (a call waits, within its own bound, for the process's earlier
// ones to meet). So every rank must call Init the same number of times,
// and where two calls run at once, which of them pairs with which on the
// other ranks follows the order each process started them; an Init that
// fails still counts. Calls with WithJob are not numbered. (Built with
// -tags mpi, Close ends MPI, after which Init fails: keep a communicator
// open until the last Init has returned.)
//
// When the launcher says that at least as many ranks share this host as
// the process may use CPUs (runtime.NumCPU), and every other rank is
// reached over TCP, an Init from the environment sets GOMAXPROCS to 1, as
// a launcher's core binding would, unless the environment sets
// GOMAXPROCS; the Close of the last communicator that lowered it
// restores the old value. The ranks then take turns on the cores instead
// of waking each other's idle threads on every message.
func Init(ctx context.Context, opts ...Option) (*Comm, error) {
	cfg := config{env: os.Getenv}
	for _, o := range opts {
		o(&cfg)
	}
	gen := -1 // the rendezvous generation of an Init from the environment
	turn := false
	if cfg.job == nil {
		gen, turn = takeInitTurn(), true
		defer func() { // on failure; success ends the turn earlier
			if turn {
				endInitTurn(gen)
			}
		}()
	}
	fail := func(err error) (*Comm, error) {
		return nil, &OpError{Op: "init", Rank: -1, Peer: -1, Tag: -1, Backend: cfg.backend, Err: err}
	}
	if !cfg.envSet {
		if err := checkEnvNames(processEnviron()); err != nil {
			return fail(err)
		}
	}
	if err := cfg.fromEnv(); err != nil {
		return fail(err)
	}
	name, drv, err := pickDriver(cfg.backend)
	cfg.backend = name
	if err != nil {
		return fail(err)
	}
	ctx, cancel := initContext(ctx, cfg.timeout)
	defer cancel()
	var job bootstrap.Job
	if cfg.job != nil {
		job = *cfg.job
	} else {
		if err := waitInitTurn(ctx, gen); err != nil {
			return fail(fmt.Errorf("waiting for this process's earlier Init to meet the other ranks: %w", err))
		}
		if job, err = bootstrap.Detect(); err != nil {
			return fail(err)
		}
		job.Generation = gen
	}
	var tr *recorder
	if cfg.trace != "" {
		if tr, err = openTrace(cfg.trace, job.Rank, job.Size); err != nil {
			return fail(err)
		}
		defer func() {
			if tr != nil { // Init failed
				tr.discard()
			}
		}()
	}
	exch, err := bootstrap.Connect(ctx, job)
	if err != nil {
		return fail(generationHint(gen, err))
	}
	bjob := backendJob(job)
	conn, err := drv.Open(ctx, backend.Config{
		Job:      bjob,
		Exchange: exch,
		Check:    *cfg.check,
		Timeout:  cfg.timeout,
		Env:      cfg.env,
	})
	exch.Close()
	if turn { // the rendezvous is over: the next Init may go on
		endInitTurn(gen)
		turn = false
	}
	if err != nil {
		return fail(generationHint(gen, err))
	}
	// A process of its own (not WithJob's ranks in one process) whose
	// peers are all over TCP takes its share of the cores; one with a
	// peer on the CUDA IPC path gets a second P (cores.go).
	coresSet := cfg.job == nil && (allTCP(conn, job.Rank, job.Size) && shareCores(job.LocalSize, os.Getenv) ||
		anyIPC(conn, job.Rank, job.Size) && widenCores(os.Getenv))
	c := &Comm{
		conn:        conn,
		sender:      senderOf(conn),
		rank:        job.Rank,
		size:        job.Size,
		backendName: name,
		timeout:     cfg.timeout,
		watchdog:    watchdogPeriod(cfg.watchdog, cfg.dogSet, cfg.timeout),
		check:       *cfg.check,
		guard:       cfg.guard,
		job:         bjob,
		env:         cfg.env,
		name:        "world",
		fam:         newFamily(),
		cores:       coresSet,
		spare:       spareCores(job.LocalSize),
		devMode:     cfg.devMode,
		tr:          tr,
	}
	tr = nil // the communicator's now
	c.track()
	c.setPeerAnswer()
	return c, nil
}

// generationHint adds to the error of a rendezvous after the process's
// first that every rank must call Init as often.
func generationHint(gen int, err error) error {
	if gen <= 0 {
		return err
	}
	return fmt.Errorf("%w (this is Init number %d of this process: every rank must call Init "+
		"the same number of times, in the same order)", err, gen+1)
}

// backendJob is what the transports read of the launch: rank 0's address
// is the listener's when the launcher handed one down.
func backendJob(job bootstrap.Job) backend.Job {
	addr := job.Addr
	if job.Listener != nil {
		addr = job.Listener.Addr().String()
	}
	return backend.Job{Rank: job.Rank, Size: job.Size, LocalRank: job.LocalRank, Key: job.Key, Addr: addr}
}

// bootstrap's Exchanger is what a Driver's Open takes.
var _ backend.Exchanger = bootstrap.Exchanger(nil)

// fromEnv fills what the options left unset from COURIER_* variables.
func (c *config) fromEnv() error {
	if c.backend == "" {
		c.backend = strings.TrimSpace(c.env("COURIER_BACKEND"))
	}
	if !c.traceSet {
		c.trace = strings.TrimSpace(c.env(traceEnv))
	}
	if !c.timeoutSet {
		d, err := timeoutFromEnv(c.env)
		if err != nil {
			return err
		}
		c.timeout = d
	}
	d, set, err := watchdogFromEnv(c.env)
	if err != nil {
		return err
	}
	c.watchdog, c.dogSet = d, set
	on := false
	switch level := strings.TrimSpace(c.env("COURIER_CHECK")); level {
	case "", "0", "false", "off", "no":
	case "1", "true", "on", "yes":
		on = true
	case "2":
		on, c.guard = true, true
	default:
		return invalidf("COURIER_CHECK=%q: want 1 (envelope checks), 2 (and send buffers checked for changes), or 0", level)
	}
	if c.check == nil {
		c.check = &on
	}
	mode, err := parseDeviceColl(c.env(deviceCollEnv))
	if err != nil {
		return err
	}
	c.devMode = mode
	if c.guardOpt != nil {
		c.guard = *c.guardOpt
	}
	return nil
}

// autoOrder is the order in which "auto" tries the backends: the GPUs
// where they are, else the host backend (shared memory within a host, TCP
// between hosts).
var autoOrder = []string{"nccl", "host"}

// pickDriver resolves a backend name; "" and "auto" take the first
// available of autoOrder.
func pickDriver(name string) (string, backend.Driver, error) {
	if name == "" || name == "auto" {
		for _, n := range autoOrder {
			d, ok := backend.Lookup(n)
			if !ok {
				continue
			}
			if a, ok := d.(backend.Availability); ok && a.Available() != nil {
				continue
			}
			return n, d, nil
		}
		return "auto", nil, fmt.Errorf("%w: no backend is available (registered: %s)",
			ErrNotSupported, strings.Join(backend.Drivers(), ", "))
	}
	d, ok := backend.Lookup(name)
	if !ok {
		names := append(backend.Drivers(), "auto")
		for _, n := range []string{"host", "tcp", "nccl"} {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		if near, ok := nearest(strings.ToLower(name), names, ""); ok {
			return name, nil, fmt.Errorf("%w: unknown backend %q: did you mean %q? (registered: %s)",
				ErrNotSupported, name, near, strings.Join(backend.Drivers(), ", "))
		}
		return name, nil, fmt.Errorf("%w: unknown backend %q (forgotten import?); registered: %s",
			ErrNotSupported, name, strings.Join(backend.Drivers(), ", "))
	}
	if a, ok := d.(backend.Availability); ok {
		if err := a.Available(); err != nil {
			return name, nil, err
		}
	}
	return name, d, nil
}

// Rank is this process's rank, in [0, Size).
func (c *Comm) Rank() int {
	if c == nil {
		return -1
	}
	return c.rank
}

// Size is the number of ranks in the communicator.
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.size
}

// Backend names the backend in use ("host", "tcp", "nccl").
func (c *Comm) Backend() string {
	if c == nil {
		return ""
	}
	return c.backendName
}

// Transport names what carries messages from this rank to rank r: "self"
// for this rank; on the host backend "shm" (shared memory, for a rank of
// this host) or "tcp"; on other backends the backend's name. It returns ""
// for a rank outside the communicator.
func (c *Comm) Transport(r int) string {
	if c == nil || r < 0 || r >= c.size {
		return ""
	}
	if t, ok := c.conn.(interface{ Transport(int) string }); ok {
		return t.Transport(r)
	}
	if r == c.rank {
		return "self"
	}
	return c.backendName
}

// LocalRank is this process's rank among the ranks on its host, or -1 when
// the launcher does not say.
func (c *Comm) LocalRank() int {
	if c == nil {
		return -1
	}
	return c.job.LocalRank
}

// Timeout is the bound on every wait (zero: none).
func (c *Comm) Timeout() time.Duration {
	if c == nil {
		return 0
	}
	return c.timeout
}

// Checked reports whether envelope checks are on (COURIER_CHECK=1).
func (c *Comm) Checked() bool { return c != nil && c.check }

// Close leaves the communicator: pending requests end with ErrClosed
// (non-blocking collectives too, the one running and those queued), peers
// are told this rank left, and every goroutine the communicator started has
// returned when Close returns. Close is idempotent and returns the same
// error every time.
//
// Close of the world (the communicator Init returned) also ends every
// communicator derived from it that is still open, as their own Close
// would (without telling their peers: the world's goodbye says it), and
// then calls bootstrap.Finalize, which in a build with -tags mpi ends MPI in
// this process (MPI cannot start again afterwards), and does nothing
// otherwise; its error is joined to the backend's. Close of a derived
// communicator leaves the world, and every other communicator, working.
//
// With checks on (COURIER_CHECK=1), messages that arrived here and that no
// receive took are an error: Close still closes, and returns an error
// matching ErrMismatch that lists them (sender, tag, count and type), since
// a program that sends what it never receives is not valid MPI.
func (c *Comm) Close() error {
	if c == nil {
		return nil
	}
	c.closeOnce.Do(func() {
		c.untrack()
		c.closeColl()
		unreceived := c.unreceived()
		err := errors.Join(unreceived, c.conn.Close())
		c.waitColl()
		err = errors.Join(err, c.dev.close()) // after the transport: it writes into no scratch memory now
		if c.parent != nil {
			c.fam.closed(c)
		} else {
			if c.fam != nil {
				for _, d := range c.fam.stillOpen() {
					d.Close()
				}
			}
			if ferr := bootstrap.Finalize(); ferr != nil {
				err = errors.Join(err, ferr)
			}
			if c.cores {
				releaseCores()
			}
			if c.tr != nil {
				err = errors.Join(err, c.tr.write(c.backendName, true))
			}
		}
		c.closeErr = c.opErr("close", -1, -1, err)
	})
	return c.closeErr
}

// Abort ends every pending and future operation on the communicator with an
// error matching both ErrAborted and err, without waiting for peers; the
// peers see this rank as lost. Use it from another goroutine to stop work
// (select on req.Done() beside ctx.Done(), then Abort). Call Close
// afterwards to release the communicator.
func (c *Comm) Abort(err error) {
	if c == nil {
		return
	}
	if err == nil {
		err = errors.New("aborted by the program")
	}
	c.conn.Abort(fmt.Errorf("%w: %w", ErrAborted, err))
	if c.tr != nil {
		c.tr.write(c.backendName, false) // what led here, should the program not reach Close; Close writes it again
	}
}

// unreceived is Close's check: with checks on, an error listing the
// messages of the program's tags that arrived and that no receive took;
// nil otherwise, or where the transport cannot list them.
func (c *Comm) unreceived() error {
	if !c.check {
		return nil
	}
	a, ok := c.conn.(interface{ Arrived() []backend.OpInfo })
	if !ok {
		return nil
	}
	var lines []string
	for _, m := range a.Arrived() {
		if m.Tag >= 0 {
			lines = append(lines, fmt.Sprintf("from rank %d, tag %d, %d × %v", m.Peer, m.Tag, m.Count, m.Type))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d message(s) sent to rank %d were never received (checks are on):\n\t%s",
		ErrMismatch, len(lines), c.rank, strings.Join(lines, "\n\t"))
}
