package shm

import (
	"fmt"
	"math"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The futex operations of linux/futex.h, which golang.org/x/sys/unix does
// not name. Without FUTEX_PRIVATE_FLAG (128) a futex is keyed by the page
// it lies on rather than by the address space, so processes that map the
// same memory share it.
const (
	_FUTEX_WAIT = 0
	_FUTEX_WAKE = 1
)

// futexWait sleeps while *addr == val, for at most timeout (no bound if
// negative). Woken, changed, interrupted and timed out are all nil.
func futexWait(addr *uint32, val uint32, timeout time.Duration) error {
	var ts *unix.Timespec
	if timeout > 0 {
		t := unix.NsecToTimespec(int64(timeout))
		ts = &t
	}
	_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), _FUTEX_WAIT, uintptr(val),
		uintptr(unsafe.Pointer(ts)), 0, 0)
	switch e {
	case 0, unix.EAGAIN, unix.EINTR, unix.ETIMEDOUT:
		return nil
	case unix.ENOSYS:
		return fmt.Errorf("shm: futex: %w (%v)", ErrNotSupported, e)
	}
	return fmt.Errorf("shm: futex wait on %p: %w", addr, e)
}

// futexWake wakes every sleeper on addr.
func futexWake(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), _FUTEX_WAKE, math.MaxInt32, 0, 0, 0)
}
