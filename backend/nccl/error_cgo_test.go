//go:build cgo

package nccl

import (
	"errors"
	"os"
	"testing"

	"github.com/courier-mp/courier/backend"
)

// TestFakeGPUChildError: the result codes of the loaded library become
// *Errors at the boundary, named, with the library's own texts.
func TestFakeGPUChildError(t *testing.T) {
	fakeGPUChild(t)
	lib, err := loadLibrary(libraryPath(os.Getenv))
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.check(ncclSuccess, "ncclSend", 0, 0); err != nil {
		t.Errorf("check(ncclSuccess) = %v", err)
	}
	err = lib.check(4, "ncclSend", 0, 0)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("check(4) = %T %v, want an *Error", err, err)
	}
	want := Error{Code: 4, Name: "ncclInvalidArgument", Op: "ncclSend",
		Msg: "invalid argument (run with NCCL_DEBUG=WARN for details)", Detail: lib.lastError(0)}
	if *e != want {
		t.Errorf("check(4) = %+v, want %+v", *e, want)
	}
	if err := lib.check(ncclRemoteError, "ncclGroupEnd", 0, 0); !errors.Is(err, backend.ErrPeerLost) {
		t.Errorf("check(ncclRemoteError) = %v, want one matching ErrPeerLost", err)
	}
}
