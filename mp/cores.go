package mp

import (
	"runtime"
	"sync"
)

// When a host runs more ranks than it has cores (4 ranks on 2 cores, as
// CI runs them), each rank has less than a core, and a rank process that
// keeps several Ps hurts the others: the runtime parks a thread of an
// idle P in the netpoller, and every message that arrives on a socket
// wakes it on a core another rank is waiting for (an 8-byte Allreduce on
// 4 ranks over TCP took 125 µs with the default GOMAXPROCS, 35-50 µs with
// 1; docs/benchmarks.md, "Ranks that outnumber the cores"). MPI's
// launchers bind each rank to a core, which gives a Go rank
// GOMAXPROCS=1 on its own. So an Init from the environment lowers
// GOMAXPROCS to 1 when the launcher says more ranks share this host
// than the process may use CPUs, unless the environment sets GOMAXPROCS
// (the user's choice stands). The Close of the last communicator that
// lowered it puts the old value back.
var cores struct {
	mu      sync.Mutex
	lowered int // open communicators that lowered GOMAXPROCS
	prev    int // GOMAXPROCS before the first of them
}

// shareCores lowers GOMAXPROCS to 1 when localSize ranks outnumber the
// CPUs (getenv reads GOMAXPROCS) and reports whether it did; the caller
// then owes one releaseCores.
func shareCores(localSize int, getenv func(string) string) bool {
	if localSize <= runtime.NumCPU() || getenv("GOMAXPROCS") != "" {
		return false
	}
	cores.mu.Lock()
	defer cores.mu.Unlock()
	if cores.lowered == 0 {
		if runtime.GOMAXPROCS(0) == 1 {
			return false
		}
		cores.prev = runtime.GOMAXPROCS(1)
	}
	cores.lowered++
	return true
}

// releaseCores undoes one shareCores: the last one restores GOMAXPROCS,
// unless something else changed it meanwhile.
func releaseCores() {
	cores.mu.Lock()
	defer cores.mu.Unlock()
	if cores.lowered--; cores.lowered == 0 && runtime.GOMAXPROCS(0) == 1 {
		runtime.GOMAXPROCS(cores.prev)
	}
}
