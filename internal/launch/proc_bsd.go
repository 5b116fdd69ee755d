//go:build unix && !linux

package launch

import "syscall"

// sysProcAttr puts each rank in a process group of its own (see signalRank).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
