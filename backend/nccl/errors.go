package nccl

import (
	"errors"
	"strconv"

	"github.com/courier-mp/courier/backend"
)

// idBytes is the size of an ncclUniqueId.
const idBytes = 128

// ncclError is a result code NCCL returned, with its name for it and its
// last-error text. ncclRemoteError (a peer's process or the network
// failed) matches backend.ErrPeerLost.
type ncclError struct {
	Code   int    // the ncclResult_t
	Op     string // the call that returned it, e.g. "ncclGroupEnd"
	Msg    string // ncclGetErrorString
	Detail string // ncclGetLastError, if any
}

func (e *ncclError) Error() string {
	s := "nccl: " + e.Op + ": " + e.Msg + " (ncclResult_t " + strconv.Itoa(e.Code) + ")"
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes ncclRemoteError match backend.ErrPeerLost.
func (e *ncclError) Is(target error) bool {
	return target == backend.ErrPeerLost && e.Code == ncclRemoteError
}

// errAbortStuck says an ncclCommAbort did not return within abortBound:
// courier stopped waiting for it, and the memory the communicator's work
// may still use is left allocated.
var errAbortStuck = errors.New("nccl: ncclCommAbort did not return in time")
