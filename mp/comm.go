package mp

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// Status describes a completed receive: the rank that sent the message, its
// tag, and how many elements of the receive buffer it filled. For a send,
// Source is the sender's own rank and Count the number of elements sent.
type Status = backend.Status

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
	rank, size  int
	backendName string
	timeout     time.Duration
	check       bool
	job         backend.Job
	env         func(string) string

	// order lets one collective (or Barrier) of this rank run at a
	// time, in their start order, blocking and non-blocking (icoll.go):
	// their messages share one tag. collPC, written in a collective's
	// turn, is the program's call of the one running (its messages report
	// it).
	order  collOrder
	collPC uintptr

	// The communicator's place among those derived from one world
	// (split.go): its id (0 for the world), its name, the one it was
	// derived from (nil for the world), the family, and its count of
	// Split and Dup calls.
	id     uint32
	name   string
	parent *Comm
	fam    *family
	splits atomic.Uint64

	closeOnce sync.Once
	closeErr  error
}

// Option configures Init. Options override the environment variables.
type Option func(*config)

type config struct {
	backend    string
	timeout    time.Duration
	timeoutSet bool
	check      *bool
	job        *bootstrap.Job
	env        func(string) string
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

// WithJob gives the launch explicitly (rank, size, rendezvous address)
// instead of reading it from the launcher's environment. The in-process test
// harness uses it to run several ranks in one process.
func WithJob(job bootstrap.Job) Option { return func(c *config) { c.job = &job } }

// WithEnv makes Init read its configuration variables through getenv instead
// of the process environment.
func WithEnv(getenv func(string) string) Option { return func(c *config) { c.env = getenv } }

// Init joins the job this process was launched in and returns its
// communicator. It reads the launcher's environment (courier run, mpirun,
// srun, or COURIER_RANK/SIZE/ADDR by hand) and COURIER_BACKEND, meets the
// other ranks and connects to them. ctx bounds this bootstrap only; it is
// not kept.
//
// Init blocks until every rank has joined. It fails, never hangs, when a
// rank does not come: at the latest after ctx's deadline, COURIER_TIMEOUT,
// or DefaultInitTimeout.
func Init(ctx context.Context, opts ...Option) (*Comm, error) {
	cfg := config{env: os.Getenv}
	for _, o := range opts {
		o(&cfg)
	}
	fail := func(err error) (*Comm, error) {
		return nil, &OpError{Op: "init", Rank: -1, Peer: -1, Tag: -1, Backend: cfg.backend, Err: err}
	}
	if err := cfg.fromEnv(); err != nil {
		return fail(err)
	}
	var job bootstrap.Job
	if cfg.job != nil {
		job = *cfg.job
	} else {
		var err error
		if job, err = bootstrap.Detect(); err != nil {
			return fail(err)
		}
	}
	name, drv, err := pickDriver(cfg.backend)
	cfg.backend = name
	if err != nil {
		return fail(err)
	}
	ctx, cancel := initContext(ctx, cfg.timeout)
	defer cancel()
	exch, err := bootstrap.Connect(ctx, job)
	if err != nil {
		return fail(err)
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
	if err != nil {
		return fail(err)
	}
	return &Comm{
		conn:        conn,
		rank:        job.Rank,
		size:        job.Size,
		backendName: name,
		timeout:     cfg.timeout,
		check:       *cfg.check,
		job:         bjob,
		env:         cfg.env,
		name:        "world",
		fam:         newFamily(),
	}, nil
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
	if !c.timeoutSet {
		d, err := timeoutFromEnv(c.env)
		if err != nil {
			return err
		}
		c.timeout = d
	}
	if c.check == nil {
		on := false
		switch s := strings.TrimSpace(c.env("COURIER_CHECK")); s {
		case "", "0", "false", "off", "no":
		case "1", "true", "on", "yes":
			on = true
		default:
			return invalidf("COURIER_CHECK=%q: want 1 or 0", s)
		}
		c.check = &on
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
func (c *Comm) Close() error {
	if c == nil {
		return nil
	}
	c.closeOnce.Do(func() {
		c.closeColl()
		err := c.conn.Close()
		c.waitColl()
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
}
