package shm

import "errors"

// ErrNotSupported reports a primitive this system cannot provide: a
// platform other than Linux, a kernel without the system call, or a call
// the kernel refuses by policy (process_vm_readv under a ptrace
// restriction). The error that wraps it says which and why.
var ErrNotSupported = errors.New("not supported")

// ErrCorrupt reports a ring whose shared words or records break its
// format: memory written by another process is never trusted, so a bad
// index or length is this error, not a panic or an access out of bounds.
// The error that wraps it says what was wrong.
var ErrCorrupt = errors.New("shm: corrupt ring")
