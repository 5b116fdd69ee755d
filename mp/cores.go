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
// which gives a Go rank GOMAXPROCS=1 on its own.
//
// The CUDA IPC path (ranks sharing a GPU) wants the opposite: its stages
// call the CUDA driver, whose calls can keep the thread that makes them,
// and with one P every other goroutine of the rank waits for the
// runtime to take the P back from that thread. A pair of ranks bound to
// one core each (mpirun's default, so GOMAXPROCS=1) on an H100 streamed
// 2 MiB messages at 27 GB/s with one P and 267 with two, and a message of
// 8 bytes took 161.6 µs one way against 152.2 (the C floor: 147.4;
// docs/benchmarks.md, "The CUDA IPC path: a second P for a bound rank").
// So a rank with a peer on the IPC path and one P is raised to 2.
//
// The user's GOMAXPROCS in the environment stands. The Close of the last
// communicator that changed it puts the old value back.
var cores struct {
	mu   sync.Mutex
	held int // open communicators that set GOMAXPROCS
	set  int // the value they set
	prev int // GOMAXPROCS before the first of them
}

// setCores sets GOMAXPROCS to want (only from the value from, unless
// from is 0), unless the environment sets GOMAXPROCS (getenv reads it) or
// another open communicator set another value, and reports whether it
// did (or found it set to want by one): the caller then owes one
// releaseCores.
func setCores(want, from int, getenv func(string) string) bool {
	if getenv("GOMAXPROCS") != "" {
		return false
	}
	cores.mu.Lock()
	defer cores.mu.Unlock()
	if cores.held > 0 {
		if cores.set != want {
			return false
		}
	} else {
		cur := runtime.GOMAXPROCS(0)
		if cur == want || from != 0 && cur != from {
			return false
		}
		cores.prev = runtime.GOMAXPROCS(want)
		cores.set = want
	}
	cores.held++
	return true
}

// shareCores lowers GOMAXPROCS to 1 when localSize ranks fill or
// outnumber the CPUs (getenv reads GOMAXPROCS) and reports whether it
// did; the caller then owes one releaseCores.
func shareCores(localSize int, getenv func(string) string) bool {
	if localSize < 2 || localSize < runtime.NumCPU() {
		return false
	}
	return setCores(1, 0, getenv)
}

// spareCores reports whether localSize ranks, those of this host, leave
// some of its CPUs idle; false when the launcher does not say how many
// there are.
func spareCores(localSize int) bool {
	return localSize > 0 && localSize < runtime.NumCPU()
}

// widenCores raises GOMAXPROCS from 1 to 2 (for the CUDA IPC path) and
// reports whether it did; the caller then owes one releaseCores.
func widenCores(getenv func(string) string) bool {
	return setCores(2, 1, getenv)
}

// releaseCores undoes one shareCores or widenCores: the last one restores
// GOMAXPROCS, unless something else changed it meanwhile.
func releaseCores() {
	cores.mu.Lock()
	defer cores.mu.Unlock()
	if cores.held--; cores.held == 0 && runtime.GOMAXPROCS(0) == cores.set {
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

// anyIPC reports whether conn reaches some rank but rank (of size) over
// the CUDA IPC path (the nccl backend's Transport names it "cuda-ipc").
func anyIPC(conn any, rank, size int) bool {
	t, ok := conn.(interface{ Transport(int) string })
	if !ok {
		return false
	}
	for r := range size {
		if r != rank && t.Transport(r) == "cuda-ipc" {
			return true
		}
	}
	return false
}
