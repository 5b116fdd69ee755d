package mp

import (
	"runtime"
	"sync"
)

// When a host runs at least as many ranks as it has cores (4 ranks on 2
// cores, as CI runs them), each rank has a core at most, and a rank
// process that keeps several Ps hurts the others when its peers are over
// TCP: the runtime parks the thread of an idle P in the netpoller, and
// every message that arrives on a socket wakes it on a core another rank
// is waiting for. An 8-byte Allreduce on 4 ranks and 2 cores over TCP
// took 125 µs with the default GOMAXPROCS, 35-50 µs with 1; 2 ranks on 2
// cores stream 1 MiB messages over TCP at 3.3-4.6 GB/s with 1 against
// 1.9-2.5 (docs/benchmarks.md, "Ranks that fill the cores"). Over shared
// memory no socket wakes anyone, and a second P keeps the copies going
// (10-12 GB/s at 1 MiB with 2, 5.6-5.8 with 1), so only ranks whose every
// peer is over TCP are lowered. MPI's launchers bind each rank to a core,
// which gives a Go rank GOMAXPROCS=1 on its own. The user's GOMAXPROCS
// in the environment stands. The Close of the last communicator that
// lowered it puts the old value back.
var cores struct {
	mu      sync.Mutex
	lowered int // open communicators that lowered GOMAXPROCS
	prev    int // GOMAXPROCS before the first of them
}

// shareCores lowers GOMAXPROCS to 1 when localSize ranks fill or
// outnumber the CPUs (getenv reads GOMAXPROCS) and reports whether it
// did; the caller then owes one releaseCores.
func shareCores(localSize int, getenv func(string) string) bool {
	if localSize < 2 || localSize < runtime.NumCPU() || getenv("GOMAXPROCS") != "" {
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

// allTCP reports whether conn reaches every rank but rank (of size) over
// TCP (the host backend's Transport names it).
func allTCP(conn any, rank, size int) bool {
	t, ok := conn.(interface{ Transport(int) string })
	if !ok || size < 2 {
		return false
	}
	for r := range size {
		if r != rank && t.Transport(r) != "tcp" {
			return false
		}
	}
	return true
}
