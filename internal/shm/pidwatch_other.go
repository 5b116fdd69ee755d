//go:build !linux

package shm

// WatchPid watches a process for its exit; it needs Linux (pidfd_open).
// Here it returns an error wrapping ErrNotSupported.
func WatchPid(pid int) (*PidWatch, error) {
	return nil, notSupported("watching a process")
}

// Exited reports whether the watched process has exited; no watch exists
// here, so it reports false.
func (w *PidWatch) Exited() bool { return false }

// Close stops the watch; no watch exists here, so it returns an error
// wrapping ErrNotSupported.
func (w *PidWatch) Close() error { return notSupported("watching a process") }
