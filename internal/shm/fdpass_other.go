//go:build !linux

package shm

import "net"

// SendFds passes descriptors over a unix socket; it is implemented for
// Linux only. Here it returns an error wrapping ErrNotSupported.
func SendFds(c *net.UnixConn, msg []byte, fds ...int) error {
	return notSupported("passing descriptors")
}

// RecvFds receives descriptors over a unix socket; it is implemented for
// Linux only. Here it returns an error wrapping ErrNotSupported.
func RecvFds(c *net.UnixConn, msg []byte, maxFds int) (n int, fds []int, err error) {
	return 0, nil, notSupported("passing descriptors")
}
