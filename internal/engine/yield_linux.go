package engine

import "golang.org/x/sys/unix"

// osYield gives the core to another runnable thread, of this process or
// another (sched_yield): runtime.Gosched only yields to goroutines. It is
// a raw system call: sched_yield never blocks, and the runtime's
// bookkeeping around a system call (entersyscall, exitsyscall) cost a
// third of an 8-byte Allreduce's time on 4 ranks sharing 2 cores
// (docs/benchmarks.md, "Collectives through shared memory").
func osYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
