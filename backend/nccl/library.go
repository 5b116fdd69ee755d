package nccl

import (
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// minVersion is the oldest NCCL the backend works with: non-blocking
// communicators and ncclCommFinalize came in 2.14.
const minVersion = 21400

// Result codes of ncclResult_t the package tells apart (nccl_types.h).
const (
	ncclSuccess     = 0
	ncclRemoteError = 6
	ncclInProgress  = 7
)

// lib is what the rest of the package needs from a loaded libnccl: the C
// layer gives it (nccl_cgo.go), or, without cgo, stands in for it
// (nccl_nocgo.go). It exists so that the two files cannot drift apart:
// *library must have exactly these methods in both builds, and the
// assertions below hold the rest of what the two share to the same
// shapes.
type lib interface {
	// uniqueID calls ncclGetUniqueId.
	uniqueID() ([idBytes]byte, error)
	// initComm calls ncclCommInitRankConfig on the device of h, for a
	// blocking communicator or a non-blocking one.
	initComm(h *devHooks, nranks, rank int, id [idBytes]byte, blocking bool) (uintptr, error)
	// asyncState calls ncclCommGetAsyncError.
	asyncState(comm uintptr) (inProgress bool, err error)
	// group and groupThen issue ops as one NCCL group; groupThen also
	// queues then behind it.
	group(h *devHooks, ops cOps, timed bool) (inProgress bool, nccl time.Duration, err error)
	groupThen(h *devHooks, ops cOps, timed bool, then *after) (inProgress bool, nccl time.Duration, done bool, err error)
	// abort calls ncclCommAbort.
	abort(h *devHooks, comm uintptr) error
}

// hooks is what the package needs of a device as C reaches it
// (devHooks): copies, with the device's context current.
type hooks interface {
	copyBytes(dst, src unsafe.Pointer, n int64) error
	copyFrom(dst unsafe.Pointer, src uintptr, n int64) error
}

// opList is what the package needs of the C op descriptors of a launch
// (cOps).
type opList interface {
	add(comm, stream, buf uintptr, count uint64, peer int, typ ncclType, recv bool)
	addColl(comm, stream uintptr, kind backend.CollKind, send, recv uintptr, count uint64, typ ncclType, op ncclRedOp, root int)
}

var (
	_ lib    = (*library)(nil)
	_ hooks  = (*devHooks)(nil)
	_ opList = (*cOps)(nil)

	// The functions both files define, with the same signatures.
	_ func(path string) (*library, error)        = openLibrary
	_ func(d cuda.Device) (*devHooks, error)     = newDevHooks
	_ func(stream, addr uintptr, v uint64) after = afterWrite
	_ func(stream, ev uintptr) after             = afterRecord
)

// libs caches loaded libraries by path: a library is loaded once per
// process and never unloaded.
var libs struct {
	sync.Mutex
	m map[string]libResult
}

type libResult struct {
	l   *library
	err error
}

// loadLibrary loads the NCCL library at path (once per process) and
// checks its version.
func loadLibrary(path string) (*library, error) {
	libs.Lock()
	defer libs.Unlock()
	if r, ok := libs.m[path]; ok {
		return r.l, r.err
	}
	l, err := openLibrary(path)
	if err == nil && l.version < minVersion {
		err = fmt.Errorf("nccl: %w: %s is NCCL %s; courier needs %s or later",
			backend.ErrNotSupported, path, versionString(l.version), versionString(minVersion))
		l = nil
	}
	if libs.m == nil {
		libs.m = make(map[string]libResult)
	}
	libs.m[path] = libResult{l, err}
	return l, err
}

// versionString spells an NCCL version code ("2.28.3").
func versionString(v int) string {
	if v < 10000 { // before 2.9: X*1000 + Y*100 + Z
		return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

// Version loads NCCL ($COURIER_NCCL_LIBRARY, or libnccl.so.2) and returns
// its version ("2.28.3") and the path it was loaded from. The error
// matches backend.ErrNotSupported when it cannot be loaded.
func Version() (version, path string, err error) {
	path = libraryPath(os.Getenv)
	l, err := loadLibrary(path)
	if err != nil {
		return "", path, err
	}
	return versionString(l.version), path, nil
}
