//go:build unix && !aix

package bootstrap

import (
	"errors"
	"net"
	"syscall"
)

// checkListening makes sure ln's socket listens: net.FileListener also
// wraps a socket that does not, which would fail only at Accept.
func checkListening(ln net.Listener) error {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var listening int
	var sockErr error
	err = raw.Control(func(fd uintptr) {
		listening, sockErr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN)
	})
	switch {
	case err != nil:
		return err
	case sockErr != nil:
		return sockErr
	case listening == 0:
		return errors.New("the socket is not listening")
	}
	return nil
}
