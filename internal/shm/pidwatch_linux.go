package shm

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// WatchPid starts watching process pid (pidfd_open, Linux 5.3 and later;
// on older kernels the error matches ErrNotSupported). The descriptor
// refers to that process, not to its number, so a pid reused after the
// process exits does not fool it; open the watch while the process is
// known to be alive (at setup, once it has spoken), since a pid that has
// already been reused would be watched as the new process. A process that
// is already gone is an error matching syscall.ESRCH.
func WatchPid(pid int) (*PidWatch, error) {
	fd, err := unix.PidfdOpen(pid, 0) // close-on-exec, always
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOSYS):
		return nil, fmt.Errorf("shm: watching process %d: pidfd_open: %w by this kernel (%w)", pid, ErrNotSupported, err)
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("shm: watching process %d: it is gone (%w)", pid, err)
	default:
		return nil, fmt.Errorf("shm: watching process %d: pidfd_open: %w", pid, err)
	}
	return &PidWatch{fd: fd, pid: pid}, nil
}

// Exited reports whether the process has exited (including a child not
// yet reaped by Wait). It is one poll(2) with a zero timeout, about a
// microsecond. After Close it reports false.
func (w *PidWatch) Exited() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.fd < 0 {
		return false
	}
	fds := [1]unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds[:], 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0
	}
}

// Close stops the watch and closes its descriptor. Calling it again does
// nothing and returns nil.
func (w *PidWatch) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil
	}
	fd := w.fd
	w.fd = -1
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("shm: closing the watch of process %d: %w", w.pid, err)
	}
	return nil
}
