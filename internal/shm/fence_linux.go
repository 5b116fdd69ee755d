package shm

import "golang.org/x/sys/unix"

// registerMembarrier registers this process for expedited global
// membarriers, where the kernel offers them.
func registerMembarrier() bool {
	cmds, _, e := unix.Syscall(unix.SYS_MEMBARRIER, membarrierQuery, 0, 0)
	if e != 0 || cmds&membarrierGlobalExpedited == 0 || cmds&membarrierRegisterGlobalExpedited == 0 {
		return false
	}
	_, _, e = unix.Syscall(unix.SYS_MEMBARRIER, membarrierRegisterGlobalExpedited, 0, 0)
	return e == 0
}

// membarrierGlobal makes every running thread of every registered process
// pass a full memory barrier. It cannot fail once registration worked;
// were it to, the sleeper's nap still bounds a missed wake-up.
func membarrierGlobal() {
	unix.Syscall(unix.SYS_MEMBARRIER, membarrierGlobalExpedited, 0, 0)
}
