//go:build !linux

package tcp

import "net"

// ownConn keeps the connection as it is: links move off the runtime's
// netpoller on Linux only (fdconn_linux.go).
func ownConn(nc net.Conn) net.Conn { return nc }
