package backend

import (
	"os"
	"slices"
	"sync"

	"github.com/courier-mp/courier/internal/errs"
)

var (
	regMu   sync.RWMutex
	drivers = map[string]Driver{}
)

var getenv = os.Getenv

// The sentinel errors every transport reports through. They are the values
// of courier's leaf package internal/errs, which package mp (and package
// cuda, for the two it reports) export too: mp.ErrTruncate ==
// backend.ErrTruncate, so a user matches them with errors.Is whichever
// package produced the error.
var (
	// ErrNotSupported: the operation or the backend cannot work here (no GPU,
	// no library, a wildcard the transport cannot match). The wrapped error
	// says why.
	ErrNotSupported = errs.ErrNotSupported
	// ErrTruncate: a message is larger than the buffer posted to receive it.
	ErrTruncate = errs.ErrTruncate
	// ErrMismatch: sender and receiver disagree on element type, count or
	// tag (reported by the checks of COURIER_CHECK=1, and always for element
	// types on transports that carry them).
	ErrMismatch = errs.ErrMismatch
	// ErrClosed: the communicator was closed.
	ErrClosed = errs.ErrClosed
	// ErrTimeout: a wait took longer than the communicator's timeout.
	ErrTimeout = errs.ErrTimeout
	// ErrPeerLost: the peer's process or connection went away.
	ErrPeerLost = errs.ErrPeerLost
	// ErrAborted: the communicator was aborted (comm.Abort); the error passed
	// to Abort is wrapped beside it.
	ErrAborted = errs.ErrAborted
	// ErrInvalid: an argument is out of range (a rank outside the
	// communicator, a negative tag).
	ErrInvalid = errs.ErrInvalid
)

// ErrPeerClosed is the "peer closed" signal of the contract: a transport
// wraps it, beside ErrPeerLost, in the error of operations with a rank
// that closed its communicator in order (said goodbye), as opposed to one
// that aborted or whose process vanished. Everything that rank sent before
// it closed was delivered, so a transport layered on another (nccl on the
// tcp host connection) can tell a peer that left from one that failed:
//
//	err := fmt.Errorf("%w: rank %d %w", backend.ErrPeerLost, rank, backend.ErrPeerClosed)
//
// Its text completes "rank N …".
var ErrPeerClosed = errs.ErrPeerClosed

// Register makes a driver available under name. It panics if name is empty,
// d is nil, or name is taken, like database/sql.Register: these are
// programming errors found at init time.
func Register(name string, d Driver) {
	if name == "" {
		panic("backend: Register with an empty name")
	}
	if d == nil {
		panic("backend: Register driver is nil")
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := drivers[name]; dup {
		panic("backend: Register called twice for driver " + name)
	}
	drivers[name] = d
}

// Lookup returns the driver registered under name.
func Lookup(name string) (Driver, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	d, ok := drivers[name]
	return d, ok
}

// Drivers returns the registered names, sorted.
func Drivers() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(drivers))
	for n := range drivers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
