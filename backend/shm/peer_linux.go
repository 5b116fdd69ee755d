package shm

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerPid is the process at the other end of uc, as the kernel says.
func peerPid(uc *net.UnixConn) (int, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Pid), nil
}

// closeFds closes descriptors received and not kept.
func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
