//go:build !amd64

package mp

import "runtime"

// callerPC returns the program counter of the user's call into mp, for the
// report of pending operations: a short stack walk (on amd64, a read of
// the caller's frame record instead).
func callerPC() uintptr {
	var pcs [1]uintptr
	if runtime.Callers(3, pcs[:]) == 0 {
		return 0
	}
	return pcs[0]
}
