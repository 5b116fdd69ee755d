package bootstrap

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/internal/errs"
	"github.com/courier-mp/courier/internal/netaddr"
)

var (
	// ErrNoRendezvous reports a job of several ranks with no way to meet:
	// no COURIER_ADDR, no listener handed down by courier run, no MPI, and
	// no address file to meet through (a launch by hand, a launcher that
	// gave no job ID, or ranks on several hosts). The error that wraps it
	// says what to set.
	ErrNoRendezvous = sentinel("bootstrap: no rendezvous for a job of several ranks: "+
		"set COURIER_ADDR=host:port of rank 0 on every rank, or launch with courier run, or build with -tags mpi", errs.ErrInvalid)

	// ErrRefused reports a rendezvous that turned a rank away, or a job
	// that rank 0 gave up on because one of its ranks was turned away: a
	// process of another job (job key mismatch), a rank that joined twice,
	// or ranks that disagree on the size. The error that wraps it carries
	// the reason. It matches errs.ErrInvalid (mp.ErrInvalid): the launch
	// is misconfigured.
	ErrRefused = sentinel("bootstrap: rendezvous refused", errs.ErrInvalid)

	// ErrPeerLost reports a rank that left, or never joined, while the
	// others waited for it. The error that wraps it names the rank. It
	// matches errs.ErrPeerLost (mp.ErrPeerLost).
	ErrPeerLost = sentinel("bootstrap: peer lost", errs.ErrPeerLost)

	// ErrTampered reports rendezvous data that fails its authentication: a
	// blob whose MAC is not the job's (PROTOCOL.md, "Rounds"), so
	// something on the path between a rank and rank 0 changed it, or the
	// peer is not of this job. The error that wraps it names the rank
	// whose blob it was. It matches errs.ErrPeerLost (mp.ErrPeerLost): the
	// connection cannot be trusted after it.
	ErrTampered = sentinel("bootstrap: rendezvous data failed authentication (changed on the way?)", errs.ErrPeerLost)

	// ErrClosed is returned by AllGather after Close. It matches
	// errs.ErrClosed (mp.ErrClosed).
	ErrClosed = sentinel("bootstrap: exchanger closed", errs.ErrClosed)
)

const (
	proveContext = "courier-rendezvous"    // a rank's proof
	okContext    = "courier-rendezvous-ok" // rank 0's proof

	// maxRanks bounds the size of a job served by one rendezvous.
	maxRanks = 1 << 20
	// lingerTimeout bounds how long rank 0 waits for a peer to take an
	// error frame before it closes the connection.
	lingerTimeout = 250 * time.Millisecond
)

// kinded is a bootstrap sentinel that also matches one of courier's own
// (internal/errs, which mp re-exports), so that a caller of mp.Init can
// branch with errors.Is(err, mp.ErrInvalid) as well as with the
// bootstrap's finer value.
type kinded struct {
	text string
	kind error
}

func (e *kinded) Error() string        { return e.text }
func (e *kinded) Is(target error) bool { return target == e.kind }

// sentinel makes a bootstrap sentinel that matches kind too.
func sentinel(text string, kind error) error { return &kinded{text: text, kind: kind} }

// aLongTimeAgo is a deadline in the past: setting it makes pending I/O on
// a connection fail at once.
var aLongTimeAgo = time.Unix(1, 0)

// Connect meets the other ranks of job and returns the Exchanger through
// which they trade blobs. It blocks until this rank has joined: on rank 0,
// until every other rank has connected and proved it knows job.Key (or
// until ctx ends, or a rank of the job is refused); on the others, until
// rank 0 has admitted them. A process that reaches the rendezvous without
// the key is refused and the job goes on.
//
// With Size 1 there is nothing to meet and no network is used. Otherwise
// rank 0 serves the rendezvous on job.Listener, or else listens on
// job.Addr; the other ranks dial job.Addr, retrying while rank 0 is not
// listening yet. Connect takes job.Listener over: it is closed once every
// rank has joined, or when Connect fails.
//
// Without either, a job started by Open MPI's mpirun, MPICH's mpiexec,
// PMIx or Slurm (Launcher "openmpi", "mpich", "pmix", "slurm") meets on
// one host through a file: rank 0 listens on a free port of loopback (or
// of COURIER_IFACE) and publishes host:port in
// <os.TempDir()>/courier-<uid>/<launcher>-<job ID>.addr, which it removes
// once it stops listening; the other ranks read the file and join,
// reading it again until ctx ends (an earlier job's file names a port that
// refuses them). That needs JobID, and all ranks on this host: when
// LocalSize says some are elsewhere, or there is no JobID, or the launch
// is by hand, Connect returns an error wrapping ErrNoRendezvous that says
// what to set.
//
// With Size > 1, COURIER_IFACE (from the process environment) is checked
// first, before any wait: a value that names no interface or address of
// this host, or an interface without an address, is an error wrapping
// ErrBadEnv that names the value and lists the host's interfaces.
//
// When Key is empty, the key FromEnv would derive from Launcher and JobID
// is used. When rank 0 gives up waiting, its error names the launcher's
// variables (Vars) and the missing ranks; when none came at all, it says
// this process may have been started alone.
//
// ctx bounds Connect only; each AllGather takes its own.
//
// Built with -tags mpi, a Job with Launcher "mpi" (from Detect) meets over
// MPI: the Exchanger's AllGather runs over MPI, its Close leaves MPI
// running, and it has a Finalize() error method, which is the package's
// Finalize (mp.Comm.Close calls it) and ends MPI.
func Connect(ctx context.Context, job Job) (Exchanger, error) {
	if ex, handled, err := connectMPI(ctx, job); handled {
		return ex, err
	}
	return connect(ctx, job, defaultRunDir())
}

// connect is Connect with the directory of the address files given.
func connect(ctx context.Context, job Job, dir string) (Exchanger, error) {
	err := job.check()
	var iface string
	if err == nil && job.Size > 1 {
		iface, err = ifaceHost()
	}
	if job.Listener != nil && (err != nil || job.Rank != 0 || job.Size == 1) {
		job.Listener.Close()
		job.Listener = nil
	}
	if err != nil {
		return nil, err
	}
	key := job.Key
	if key == "" {
		key = derivedKey(job.Launcher, job.JobID)
	}
	key, job.JobID = job.generation(key)
	switch {
	case job.Size == 1:
		return &single{}, nil
	case job.Addr == "" && job.Listener == nil && discoverable(job.Launcher):
		return discover(ctx, job, key, dir, iface)
	case job.Addr == "" && job.Listener == nil:
		return nil, noRendezvous(job)
	case job.Rank == 0:
		return exchanger(serve(ctx, job, key))
	default:
		return exchanger(join(ctx, job, key))
	}
}

// ifaceHost resolves COURIER_IFACE: "" when it is unset.
func ifaceHost() (string, error) {
	v := os.Getenv(netaddr.Var)
	if strings.TrimSpace(v) == "" {
		return "", nil
	}
	host, err := netaddr.Resolve(v)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadEnv, err)
	}
	return host, nil
}

// said describes the launch for error messages: the launcher, its job ID,
// and the variables that decided rank and size.
func (j *Job) said() string {
	s := fmt.Sprintf("launcher %q", j.Launcher)
	if j.JobID != "" {
		s += fmt.Sprintf(", job ID %q", j.JobID)
	}
	if len(j.Vars) > 0 {
		s += ": " + strings.Join(j.Vars, " ")
	}
	if j.LocalSize > 0 {
		s += fmt.Sprintf(", local size %d", j.LocalSize)
	}
	return s
}

// exchanger returns e as an Exchanger, or a nil one on error (not an
// interface holding a nil pointer).
func exchanger[E Exchanger](e E, err error) (Exchanger, error) {
	if err != nil {
		return nil, err
	}
	return e, nil
}

// check refuses a Job that FromEnv would not return.
func (j *Job) check() error {
	if j.Size < 1 || j.Size > maxRanks || j.Rank < 0 || j.Rank >= j.Size {
		return fmt.Errorf("bootstrap: invalid job: rank %d of size %d (the rendezvous serves 1 to %d ranks): %w",
			j.Rank, j.Size, maxRanks, errs.ErrInvalid)
	}
	return nil
}

// noRendezvous explains ErrNoRendezvous with what the launcher said.
func noRendezvous(job Job) error {
	said := ""
	if len(job.Vars) > 0 {
		said = ": " + strings.Join(job.Vars, " ")
	}
	return fmt.Errorf("%w (rank %d of %d, launcher %q%s)", ErrNoRendezvous, job.Rank, job.Size, job.Launcher, said)
}

// single is the Exchanger of a job of one rank.
type single struct{ closed atomic.Bool }

// AllGather returns a copy of data, the only contribution.
func (s *single) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	if err := checkBlob(len(data)); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return [][]byte{cloneBlob(data)}, nil
}

// Close makes later AllGathers fail; it is idempotent.
func (s *single) Close() error {
	s.closed.Store(true)
	return nil
}

// cloneBlob copies b; the copy is never nil.
func cloneBlob(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}

// watch makes pending and later I/O on conns fail once ctx ends; the
// returned stop reports false if that happened (or is happening).
func watch(ctx context.Context, conns []net.Conn) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		for _, c := range conns {
			if c != nil {
				c.SetDeadline(aLongTimeAgo)
			}
		}
	})
}

// interrupted is the error of an operation that ctx cut short.
func interrupted(ctx context.Context, rank int, op string) error {
	return fmt.Errorf("bootstrap: rank %d: %s interrupted: %w", rank, op, context.Cause(ctx))
}
