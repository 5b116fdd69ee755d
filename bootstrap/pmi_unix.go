//go:build unix

package bootstrap

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// pmiConn returns a connection over a duplicate of the inherited
// descriptor fd, which stays open.
func pmiConn(fd int) (net.Conn, error) {
	syscall.ForkLock.RLock()
	dup, err := syscall.Dup(fd)
	if err == nil {
		syscall.CloseOnExec(dup)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("descriptor %d: %w", fd, err)
	}
	f := os.NewFile(uintptr(dup), "PMI_FD")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("descriptor %d is not a socket: %w", fd, err)
	}
	return c, nil
}
