//go:build mpi

package bootstrap

// This file is the build with -tags mpi: rank and size come from MPI
// (github.com/emer/empi, which links Open MPI through pkg-config "ompi"),
// and the all-gather of the transports' blobs runs over MPI. It imports
// "C", so it also needs cgo; mpi_nocgo.go stops a build with the tag and
// CGO_ENABLED=0 with an error that says so. nompi.go is the build without
// the tag.
//
// empi gives courier MPI's world communicator, rank and size, a new
// communicator over a group, and fixed-size all-gathers, but no
// MPI_Init_thread at a chosen level, no MPI_Finalized, no error handlers,
// no MPI_Allgatherv: the few calls below do those directly, against the
// same MPI library empi links.

/*
#cgo pkg-config: ompi
#include <mpi.h>

static int courier_mpi_state(int *initialized, int *finalized) {
	int rc = MPI_Initialized(initialized);
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	return MPI_Finalized(finalized);
}

static int courier_mpi_init(int *provided) {
	return MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, provided);
}

static int courier_mpi_finalize(void) {
	return MPI_Finalize();
}

// courier_world_errors_return makes MPI_COMM_WORLD return errors instead of
// aborting, keeping its handler in saved for courier_world_restore.
static int courier_world_errors_return(MPI_Errhandler *saved) {
	int rc = MPI_Comm_get_errhandler(MPI_COMM_WORLD, saved);
	if (rc != MPI_SUCCESS) {
		return rc;
	}
	return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

static int courier_world_restore(MPI_Errhandler saved) {
	int rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, saved);
	MPI_Errhandler_free(&saved);
	return rc;
}

static void courier_error_string(int code, char *text, int *len) {
	*len = 0;
	if (MPI_Error_string(code, text, len) != MPI_SUCCESS) {
		*len = 0;
	}
}

static void courier_library_version(char *text, int *len) {
	*len = 0;
	if (MPI_Get_library_version(text, len) != MPI_SUCCESS) {
		*len = 0;
	}
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/emer/empi/mpi"
)

// errMPIFinalized reports a use of MPI after it ended in this process.
var errMPIFinalized = errors.New("bootstrap: MPI has been finalised in this process " +
	"(by bootstrap.Finalize, which mp.Comm.Close calls, or by the program), and MPI cannot start again")

// mpiProc is this process's MPI, as courier uses it: set up once by
// Detect, ended once by Finalize.
var mpiProc mpiProcess

// mpiProcess is the state of MPI in a process, as courier uses it.
type mpiProcess struct {
	mu          sync.Mutex
	setUp       bool      // set-up was attempted; setupErr says how it went
	setupErr    error     //
	owned       bool      // courier called MPI_Init_thread, so Finalize calls MPI_Finalize
	comm        *mpi.Comm // courier's own communicator over the world's ranks, returning errors
	rank, size  int       // in MPI_COMM_WORLD
	library     string    // the MPI library's name and version
	finalized   bool      // MPI has ended; finalizeErr says how
	finalizeErr error     //
	abandoned   int       // all-gathers whose caller gave up while MPI still runs them
}

// mpiTurn is held by the goroutine that is in MPI on courier's behalf:
// courier's MPI calls are serialised, as MPI_THREAD_SERIALIZED asks, and
// may come from any OS thread.
var mpiTurn = make(chan struct{}, 1)

// detectMPI is Detect in a build with -tags mpi; handled is false when
// courier run or COURIER_RANK/COURIER_SIZE started the process, which then
// goes on as without the tag.
//
// The first call sets MPI up for the process: MPI_Init_thread asking for
// MPI_THREAD_SERIALIZED, unless the program has initialised MPI itself
// (its thread level then stays; courier's calls are serialised but come
// from any OS thread, so it should be at least MPI_THREAD_SERIALIZED);
// then a communicator of courier's own over MPI_COMM_WORLD's ranks, whose
// errors are returned rather than fatal (MPI_COMM_WORLD's error handler is
// left as it was). A failed set-up is not retried. MPI started by a lone
// process (a singleton) sees one rank.
func detectMPI() (job Job, handled bool, err error) {
	if launchedByCourier(os.Getenv) {
		return Job{}, false, nil
	}
	rank, size, library, err := setUpMPI()
	if err != nil {
		return Job{}, true, err
	}
	job, err = mpiJob(os.Getenv, rank, size, library)
	return job, true, err
}

// setUpMPI sets MPI up once for the process and reports this process's
// place in MPI_COMM_WORLD.
func setUpMPI() (rank, size int, library string, err error) {
	mpiTurn <- struct{}{}
	defer func() { <-mpiTurn }()
	p := &mpiProc
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.finalized:
		return 0, 0, "", errMPIFinalized
	case !p.setUp:
		p.setUp = true
		// courier returns MPI's errors; it does not log them (empi would).
		mpi.LogErrors = false
		p.library = libraryVersion()
		p.setupErr = p.start()
	}
	return p.rank, p.size, p.library, p.setupErr
}

// start initialises MPI unless the program has, and makes courier's
// communicator. The caller holds mpiTurn and p.mu.
func (p *mpiProcess) start() error {
	var initialized, finalized C.int
	if rc := C.courier_mpi_state(&initialized, &finalized); rc != C.MPI_SUCCESS {
		return mpiError(rc, "MPI_Initialized")
	}
	if finalized != 0 {
		p.finalized = true
		return errMPIFinalized
	}
	if initialized == 0 {
		var provided C.int
		if rc := C.courier_mpi_init(&provided); rc != C.MPI_SUCCESS {
			return mpiError(rc, "MPI_Init_thread")
		}
		p.owned = true
	}
	// A communicator inherits its parent's error handler: make the world's
	// return errors while courier's is made, then put the world's back.
	var saved C.MPI_Errhandler
	if rc := C.courier_world_errors_return(&saved); rc != C.MPI_SUCCESS {
		return mpiError(rc, "MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)")
	}
	ranks := make([]int, mpi.WorldSize())
	for i := range ranks {
		ranks[i] = i
	}
	comm, err := mpi.NewComm(ranks)
	if rc := C.courier_world_restore(saved); rc != C.MPI_SUCCESS && err == nil {
		err = mpiError(rc, "MPI_Comm_set_errhandler(MPI_COMM_WORLD, its handler)")
	}
	if err != nil {
		return fmt.Errorf("bootstrap: making courier's MPI communicator: %w", err)
	}
	p.comm, p.rank, p.size = comm, comm.Rank(), comm.Size()
	return nil
}

// Finalize ends this process's use of MPI (in this build, made with -tags
// mpi). If courier initialised MPI (in Detect), Finalize calls
// MPI_Finalize, which waits for the other ranks to finalise too; if the
// program initialised MPI itself, the program also ends it, and Finalize
// leaves it running. Finalize is idempotent: MPI is finalised at most once
// per process, and later calls return the first call's error. It is safe
// when MPI was never set up (it does nothing) and when the program has
// finalised MPI already. Once MPI has ended, it cannot start again in the
// process: Detect (unless courier run or COURIER_RANK/COURIER_SIZE started
// the process), Connect and AllGather on an MPI Exchanger fail.
//
// While an AllGather abandoned by its context is still running inside MPI
// (a rank never joined it), MPI cannot be finalised: Finalize then returns
// an error and the process should exit, which makes the launcher end the
// job.
//
// mp.Comm.Close calls Finalize after closing its backend, so a program
// never needs to call it itself. Errors from MPI are returned, never fatal.
func Finalize() error {
	p := &mpiProc
	p.mu.Lock()
	if !p.setUp || !p.owned || p.finalized {
		defer p.mu.Unlock()
		return p.finalizeErr
	}
	p.mu.Unlock()
	if err := takeTurnUnlessStuck(); err != nil {
		return err
	}
	defer func() { <-mpiTurn }()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finalized {
		return p.finalizeErr
	}
	var initialized, finalized C.int
	if rc := C.courier_mpi_state(&initialized, &finalized); rc == C.MPI_SUCCESS && finalized == 0 {
		p.finalizeErr = mpiError(C.courier_mpi_finalize(), "MPI_Finalize")
	}
	p.finalized = true
	return p.finalizeErr
}

// takeTurnUnlessStuck waits for mpiTurn, and gives up with an error when
// an abandoned all-gather holds it.
func takeTurnUnlessStuck() error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		mpiProc.mu.Lock()
		stuck := mpiProc.abandoned
		mpiProc.mu.Unlock()
		if stuck > 0 {
			return fmt.Errorf("bootstrap: MPI not finalised: %d all-gather(s) abandoned by their context are still waiting "+
				"inside MPI for ranks that never joined; exit the process, and the launcher ends the job", stuck)
		}
		select {
		case mpiTurn <- struct{}{}:
			return nil
		case <-tick.C:
		}
	}
}

// mpiEnded reports whether MPI has been finalised, by courier or by the
// program; the caller holds mpiTurn.
func mpiEnded() bool {
	mpiProc.mu.Lock()
	defer mpiProc.mu.Unlock()
	if mpiProc.finalized {
		return true
	}
	var initialized, finalized C.int
	return C.courier_mpi_state(&initialized, &finalized) != C.MPI_SUCCESS || finalized != 0
}

// connectMPI is Connect in a build with -tags mpi, for a Job with Launcher
// "mpi" (from Detect); handled is false for any other Job, which goes on
// to the rendezvous. The returned Exchanger's AllGather runs over MPI, its
// Close leaves MPI running, and its Finalize method is the package's
// Finalize.
func connectMPI(ctx context.Context, job Job) (ex Exchanger, handled bool, err error) {
	if job.Launcher != mpiLauncher {
		return nil, false, nil
	}
	if job.Listener != nil { // MPI needs no rendezvous
		job.Listener.Close()
	}
	if err := job.check(); err != nil {
		return nil, true, err
	}
	p := &mpiProc
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.finalized:
		return nil, true, errMPIFinalized
	case !p.setUp:
		return nil, true, errors.New(`bootstrap: a Job with Launcher "mpi" comes from Detect, which sets MPI up, but MPI is not set up in this process`)
	case p.setupErr != nil:
		return nil, true, p.setupErr
	case job.Rank != p.rank || job.Size != p.size:
		return nil, true, fmt.Errorf("bootstrap: invalid job: rank %d of %d, but MPI_COMM_WORLD says rank %d of %d",
			job.Rank, job.Size, p.rank, p.size)
	}
	if ctx.Err() != nil {
		return nil, true, interrupted(ctx, job.Rank, "connect")
	}
	return &mpiExchanger{comm: p.comm, rank: p.rank, size: p.size}, true, nil
}

// mpiExchanger is the Exchanger of a job that MPI started.
type mpiExchanger struct {
	comm       *mpi.Comm
	rank, size int
	closed     atomic.Bool
	broken     atomic.Pointer[error] // why the ranks may be out of step
}

// AllGather gathers every rank's data over MPI: an all-gather of the
// lengths, then one of the blobs, each padded to the longest (empi has no
// MPI_Allgatherv). MPI cannot cancel a collective: when ctx ends first,
// AllGather returns at once, MPI goes on waiting for the ranks in the
// background, and the Exchanger is broken (its ranks are out of step).
func (x *mpiExchanger) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	if err := checkBlob(len(data)); err != nil {
		return nil, err
	}
	if x.closed.Load() {
		return nil, ErrClosed
	}
	if why := x.broken.Load(); why != nil {
		return nil, *why
	}
	if ctx.Err() != nil {
		return nil, interrupted(ctx, x.rank, "MPI all-gather")
	}
	select {
	case mpiTurn <- struct{}{}:
	case <-ctx.Done():
		return nil, interrupted(ctx, x.rank, "MPI all-gather")
	}
	if mpiEnded() {
		<-mpiTurn
		return nil, fmt.Errorf("%w: %w", ErrClosed, errMPIFinalized)
	}
	if x.size == 1 {
		<-mpiTurn
		return [][]byte{cloneBlob(data)}, nil
	}
	type result struct {
		blobs [][]byte
		err   error
	}
	var finished, abandoned bool // guarded by mpiProc.mu
	done := make(chan result, 1)
	mine := cloneBlob(data)
	go func() {
		blobs, err := gatherOverMPI(x.comm, x.rank, x.size, mine)
		mpiProc.mu.Lock()
		finished = true
		if abandoned {
			mpiProc.abandoned--
		}
		mpiProc.mu.Unlock()
		<-mpiTurn
		done <- result{blobs, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		mpiProc.mu.Lock()
		if !finished {
			abandoned = true
			mpiProc.abandoned++
		}
		mpiProc.mu.Unlock()
		if abandoned {
			err := interrupted(ctx, x.rank, "MPI all-gather")
			why := fmt.Errorf("bootstrap: rank %d: an earlier MPI all-gather was abandoned; the ranks are out of step", x.rank)
			x.broken.Store(&why)
			return nil, err
		}
		r = <-done
	}
	if r.err != nil {
		why := fmt.Errorf("bootstrap: rank %d: an earlier MPI all-gather failed; the ranks may be out of step: %w", x.rank, r.err)
		x.broken.Store(&why)
	}
	return r.blobs, r.err
}

// gatherOverMPI is the all-gather itself; the caller holds mpiTurn.
func gatherOverMPI(comm *mpi.Comm, rank, size int, data []byte) ([][]byte, error) {
	lens := make([]int64, size)
	if err := comm.AllGatherI64(lens, []int64{int64(len(data))}); err != nil {
		return nil, fmt.Errorf("bootstrap: rank %d: MPI all-gather of the blob lengths: %w", rank, err)
	}
	longest := int64(0)
	for r, n := range lens {
		if n < 0 || n > MaxBlob {
			// Every rank sees the same lengths and stops here, so none is
			// left waiting for the blobs.
			return nil, fmt.Errorf("bootstrap: rank %d: rank %d contributes %d bytes to an MPI all-gather (at most %d)",
				rank, r, n, MaxBlob)
		}
		longest = max(longest, n)
	}
	blobs := make([][]byte, size)
	if longest == 0 {
		for r := range blobs {
			blobs[r] = []byte{}
		}
		return blobs, nil
	}
	padded := make([]byte, longest)
	copy(padded, data)
	all := make([]byte, int64(size)*longest)
	if err := comm.AllGatherU8(all, padded); err != nil {
		return nil, fmt.Errorf("bootstrap: rank %d: MPI all-gather of %d-byte blobs: %w", rank, longest, err)
	}
	for r, n := range lens {
		at := int64(r) * longest
		blobs[r] = all[at : at+n : at+n]
	}
	return blobs, nil
}

// Close makes later AllGathers fail with ErrClosed; it leaves MPI running
// (Finalize ends it) and is idempotent.
func (x *mpiExchanger) Close() error {
	x.closed.Store(true)
	return nil
}

// Finalize ends this process's use of MPI: it is the package's Finalize.
func (x *mpiExchanger) Finalize() error { return Finalize() }

// mpiError turns an MPI error code into a Go error naming the call; nil
// for MPI_SUCCESS.
func mpiError(rc C.int, call string) error {
	if rc == C.MPI_SUCCESS {
		return nil
	}
	text := make([]byte, C.MPI_MAX_ERROR_STRING+1)
	var n C.int
	C.courier_error_string(rc, (*C.char)(unsafe.Pointer(&text[0])), &n)
	if n <= 0 || int(n) > len(text) {
		return fmt.Errorf("bootstrap: %s: MPI error %d", call, int(rc))
	}
	return fmt.Errorf("bootstrap: %s: MPI error %d: %s", call, int(rc), text[:n])
}

// libraryVersion names the linked MPI library and its version, such as
// "Open MPI v4.1.4"; MPI allows asking before MPI_Init.
func libraryVersion() string {
	text := make([]byte, C.MPI_MAX_LIBRARY_VERSION_STRING+1)
	var n C.int
	C.courier_library_version((*C.char)(unsafe.Pointer(&text[0])), &n)
	if n <= 0 || int(n) > len(text) {
		return ""
	}
	v := strings.TrimRight(string(text[:n]), "\x00")
	if i := strings.IndexAny(v, ",\n"); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v)
}
