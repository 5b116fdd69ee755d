//go:build !linux

package shm

import "time"

// futexWait needs Linux; nothing sleeps here.
func futexWait(addr *uint32, val uint32, timeout time.Duration) error {
	return notSupported("futex")
}

// futexWake has nobody to wake: Sleep never sleeps here.
func futexWake(addr *uint32) {}
