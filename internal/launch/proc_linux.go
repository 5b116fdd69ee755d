package launch

import "syscall"

// sysProcAttr puts each rank in a process group of its own (see signalRank)
// and has the kernel kill it if the launcher dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
