//go:build !unix

package tcp

import (
	"errors"
	"syscall"
)

// Where there is no unix system call interface, sockets are read by the
// reader goroutine alone, with blocking reads.

// sysIO is empty here: no descriptor is ever read directly.
type sysIO struct {
	p              []byte
	n              int
	err            error
	readFn, heldFn func(fd uintptr)
	waitFn         func(fd uintptr) bool
}

func (s *sysIO) init() {}

// errAgain is never returned here.
var errAgain = errors.New("tcp: would block")

// probeControl reports false: no descriptor is read directly here.
func probeControl(syscall.RawConn) bool { return false }
