package engine

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// osYield gives the core to another runnable thread, of this process or
// another (sched_yield): runtime.Gosched only yields to goroutines. It is
// a raw system call: sched_yield never blocks, and the runtime's
// bookkeeping around a system call (entersyscall, exitsyscall) cost a
// third of an 8-byte Allreduce's time on 4 ranks sharing 2 cores
// (docs/benchmarks.md, "Collectives through shared memory").
func osYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// hostCPUs is the number of CPUs of the host online (not only those this
// process may run on, which runtime.NumCPU counts), or 0 when unknown.
func hostCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0
	}
	return countCPUList(strings.TrimSpace(string(b)))
}

// countCPUList counts the CPUs of a kernel CPU list ("0-3,8,10-11"), or
// returns 0 when it does not parse.
func countCPUList(s string) int {
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}
