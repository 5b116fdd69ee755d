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

// The reads and the ioctl below are raw system calls (no entersyscall and
// exitsyscall around them): on a non-blocking socket they never block, and
// a rank's waiter spends most of its polling inside them. As ordinary
// system calls, the runtime's monitor found the waiter's P in a system
// call on most of its ticks and handed the P to another thread, which the
// waiter's thread then had to win back by sleeping and being woken: about
// 196,000 context switches in a 2-rank TCP ping-pong that Open MPI runs
// with 1,500 (docs/benchmarks.md, "TCP: the waiters' reads as raw system
// calls").
func (s *sysIO) init() {
	s.readFn = func(fd uintptr) {
		for {
			s.n, s.err = rawRead(fd, s.p)
			if s.err != unix.EINTR {
				return
			}
		}
	}
	s.heldFn = func(fd uintptr) {
		var v int32
		_, _, errno := unix.RawSyscall(unix.SYS_IOCTL, fd, uintptr(ioctlHeld), uintptr(unsafe.Pointer(&v)))
		s.n, s.err = int(v), errnoErr(errno)
	}
	s.waitFn = func(fd uintptr) bool {
		// recvfrom without an address, which unix.Recvfrom would allocate.
		_, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.one[0])), 1,
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

// rawRead is read(2) on a non-blocking descriptor, as a raw system call
// (sysIO.init says why).
func rawRead(fd uintptr, p []byte) (int, error) {
	var base unsafe.Pointer
	if len(p) > 0 {
		base = unsafe.Pointer(&p[0])
	}
	r, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(base), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// errnoErr is errno as an error: nil for 0.
func errnoErr(errno syscall.Errno) error {
	if errno != 0 {
		return errno
	}
	return nil
}
