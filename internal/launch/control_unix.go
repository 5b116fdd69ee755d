//go:build unix

package launch

import (
	"os"
	"syscall"
)

// socketPair returns the two ends of a new Unix stream socket pair, both
// close-on-exec (exec.Cmd's ExtraFiles clears that for the rank's end).
func socketPair() (*os.File, *os.File, error) {
	syscall.ForkLock.RLock() // no exec between the pair's making and close-on-exec
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control"), nil
}
