package nccl

import (
	"errors"
	"strconv"

	"github.com/courier-mp/courier/backend"
)

// idBytes is the size of an ncclUniqueId.
const idBytes = 128

// Error is an error NCCL returned: the result code of the call, with
// NCCL's name and description of it and NCCL's last-error text. Every
// NCCL failure reaches the caller as an *Error (inside an *mp.OpError, on
// the nccl backend), so a program can tell them apart with errors.As:
//
//	var ne *nccl.Error
//	if errors.As(err, &ne) && ne.Name == "ncclSystemError" { … }
//
// An Error of ncclRemoteError (a peer's process or the network failed)
// matches backend.ErrPeerLost (mp.ErrPeerLost) with errors.Is. Others match
// nothing but themselves: compare Code or Name.
type Error struct {
	// Code is the ncclResult_t, e.g. 6. Codes below 0 are courier's own: a
	// failed switch of the thread's CUDA context around the NCCL call
	// (Msg says which and holds the CUresult).
	Code int
	// Name is NCCL's name for Code, e.g. "ncclRemoteError", or
	// "ncclResult_t(N)" for a code NCCL does not name.
	Name string
	// Op is the call that returned it, e.g. "ncclGroupEnd".
	Op string
	// Msg is NCCL's description of Code (ncclGetErrorString).
	Msg string
	// Detail is NCCL's description of its last error (ncclGetLastError),
	// empty when NCCL has none.
	Detail string
}

// Error returns "nccl: Op: Msg (ncclResult_t Code)", and ": Detail" when
// NCCL said more.
func (e *Error) Error() string {
	s := "nccl: " + e.Op + ": " + e.Msg + " (ncclResult_t " + strconv.Itoa(e.Code) + ")"
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes ncclRemoteError match backend.ErrPeerLost.
func (e *Error) Is(target error) bool {
	return target == backend.ErrPeerLost && e.Code == ncclRemoteError
}

// resultNames are NCCL's names of its result codes (nccl.h).
var resultNames = [...]string{
	"ncclSuccess",
	"ncclUnhandledCudaError",
	"ncclSystemError",
	"ncclInternalError",
	"ncclInvalidArgument",
	"ncclInvalidUsage",
	"ncclRemoteError",
	"ncclInProgress",
}

// resultName is NCCL's name of result code r (Error.Name).
func resultName(r int) string {
	if r >= 0 && r < len(resultNames) {
		return resultNames[r]
	}
	return "ncclResult_t(" + strconv.Itoa(r) + ")"
}

// errAbortStuck says an ncclCommAbort did not return within abortBound:
// courier stopped waiting for it, and the memory the communicator's work
// may still use is left allocated.
var errAbortStuck = errors.New("nccl: ncclCommAbort did not return in time")
