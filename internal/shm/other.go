//go:build !linux

package shm

import "fmt"

// notSupported is the error of every primitive that needs Linux.
func notSupported(what string) error {
	return fmt.Errorf("shm: %s: %w on this platform (Linux only)", what, ErrNotSupported)
}
