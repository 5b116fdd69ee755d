//go:build unix

package proctest

import "syscall"

// stopSignal is what Launch sends a rank that outlives the job's limit:
// SIGQUIT makes a Go program print every goroutine's stack and exit.
var stopSignal = syscall.SIGQUIT
