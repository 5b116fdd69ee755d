//go:build !unix

package bootstrap

import (
	"errors"
	"net"
)

// pmiConn cannot use an inherited descriptor on this platform.
func pmiConn(fd int) (net.Conn, error) {
	return nil, errors.New("PMI over an inherited descriptor is not supported on this platform")
}
