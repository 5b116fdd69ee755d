package engine

import "golang.org/x/sys/unix"

// osYield gives the core to another runnable thread, of this process or
// another (sched_yield): runtime.Gosched only yields to goroutines.
func osYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
