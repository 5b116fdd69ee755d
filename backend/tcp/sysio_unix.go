//go:build unix

package tcp

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysIO holds the arguments and results of the functions the reader runs
// on the descriptor; the functions are made once, so a read allocates
// nothing.
type sysIO struct {
	p              []byte
	n              int
	err            error
	readFn, heldFn func(fd uintptr)
	waitFn         func(fd uintptr) bool
	one            [1]byte
}

// errAgain is the error of a read that would block.
const errAgain = unix.EAGAIN

// probeControl reports whether rc gives a descriptor this package can read
// without blocking (a socket; Go sets it non-blocking).
func probeControl(rc syscall.RawConn) bool {
	ok := false
	rc.Control(func(fd uintptr) {
		_, err := unix.IoctlGetInt(int(fd), ioctlHeld)
		ok = err == nil
	})
	return ok
}

func (s *sysIO) init() {
	s.readFn = func(fd uintptr) {
		for {
			s.n, s.err = unix.Read(int(fd), s.p)
			if s.err != unix.EINTR {
				return
			}
		}
	}
	s.heldFn = func(fd uintptr) { s.n, s.err = unix.IoctlGetInt(int(fd), ioctlHeld) }
	s.waitFn = func(fd uintptr) bool {
		// recvfrom without an address, which unix.Recvfrom would allocate.
		_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.one[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		if errno != 0 && errno != unix.EAGAIN && errno != unix.EINTR {
			// The socket's error (ETIMEDOUT after the user timeout, a
			// reset): the kernel reports it once, so keep it for the
			// reader, whose next read sees only the end.
			s.err = errno
		}
		return errno != unix.EAGAIN
	}
}
