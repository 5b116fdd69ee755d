package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"
)

var (
	// ErrNoRendezvous reports a job of several ranks with no way to meet:
	// no COURIER_ADDR, no listener handed down by courier run, no MPI.
	ErrNoRendezvous = errors.New("bootstrap: no rendezvous for a job of several ranks: " +
		"set COURIER_ADDR=host:port of rank 0 on every rank, or launch with courier run, or build with -tags mpi")

	// ErrRefused reports a rendezvous that turned a rank away, or a job
	// that rank 0 gave up on because one of its ranks was turned away: a
	// process of another job (job key mismatch), a rank that joined twice,
	// or ranks that disagree on the size. The error that wraps it carries
	// the reason.
	ErrRefused = errors.New("bootstrap: rendezvous refused")

	// ErrPeerLost reports a rank that left, or never joined, while the
	// others waited for it. The error that wraps it names the rank.
	ErrPeerLost = errors.New("bootstrap: peer lost")

	// ErrClosed is returned by AllGather after Close.
	ErrClosed = errors.New("bootstrap: exchanger closed")
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
// rank has joined, or when Connect fails. Without either, Connect returns
// an error wrapping ErrNoRendezvous. When Key is empty, the key FromEnv
// would derive from Launcher and JobID is used.
//
// ctx bounds Connect only; each AllGather takes its own.
func Connect(ctx context.Context, job Job) (Exchanger, error) {
	err := job.check()
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
	switch {
	case job.Size == 1:
		return &single{}, nil
	case job.Addr == "" && job.Listener == nil:
		return nil, noRendezvous(job)
	case job.Rank == 0:
		return exchanger(serve(ctx, job, key))
	default:
		return exchanger(join(ctx, job, key))
	}
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
		return fmt.Errorf("bootstrap: invalid job: rank %d of size %d (the rendezvous serves 1 to %d ranks)",
			j.Rank, j.Size, maxRanks)
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
