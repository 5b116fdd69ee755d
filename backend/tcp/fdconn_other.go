//go:build !linux

package tcp

import "net"

// ownConn keeps the connection as it is: links move off the runtime's
// netpoller on Linux only (fdconn_linux.go).
func ownConn(nc net.Conn) net.Conn { return nc }

// readySet finds the links with something to read in one system call on
// Linux (fdconn_linux.go); here waiters poll every link.
type readySet struct{}

// newReadySet returns nil: no ready set here.
func newReadySet([]*link) *readySet { return nil }

// poll is never called (newReadySet gives none).
func (*readySet) poll([]*link) (did, ok bool) { return false, false }
