package nccl

import (
	"errors"
	"fmt"
	"testing"

	"github.com/courier-mp/courier/backend"
)

// An NCCL failure is an *Error a caller reaches with errors.As through
// the wrapping around it; ncclRemoteError, and it alone, is a lost peer.
func TestErrorAsAndIs(t *testing.T) {
	for code, name := range map[int]string{
		1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
		4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
		-1: "ncclResult_t(-1)", 99: "ncclResult_t(99)",
	} {
		e := &Error{Code: code, Name: resultName(code), Op: "ncclGroupEnd", Msg: "m"}
		if e.Name != name {
			t.Errorf("resultName(%d) = %q, want %q", code, e.Name, name)
		}
		err := fmt.Errorf("nccl: launching a group on rank 0: %w", e)
		var got *Error
		if !errors.As(err, &got) || got != e {
			t.Errorf("errors.As(%v) = %v, want the *Error", err, got)
		}
		if lost := errors.Is(err, backend.ErrPeerLost); lost != (code == 6) {
			t.Errorf("code %d: errors.Is(ErrPeerLost) = %v", code, lost)
		}
		for _, s := range []error{backend.ErrNotSupported, backend.ErrTimeout, backend.ErrInvalid, backend.ErrClosed} {
			if errors.Is(err, s) {
				t.Errorf("code %d matches %v", code, s)
			}
		}
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{Code: 2, Name: "ncclSystemError", Op: "ncclCommInitRankConfig", Msg: "unhandled system error"}
	if got, want := e.Error(), "nccl: ncclCommInitRankConfig: unhandled system error (ncclResult_t 2)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e.Detail = "socket: connection refused"
	if got, want := e.Error(), "nccl: ncclCommInitRankConfig: unhandled system error (ncclResult_t 2): socket: connection refused"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
