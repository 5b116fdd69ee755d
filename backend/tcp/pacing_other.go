//go:build !linux

package tcp

import "net"

// unpace does nothing here: choosing a connection's congestion control
// (TCP_CONGESTION) is Linux's.
func unpace(*net.TCPConn) bool { return false }
