package shm

import (
	"sync"
	"sync/atomic"
)

// Publishing without a fence.
//
// A producer publishes with one store (a shared-memory collective's head
// or sequence word, in backend/shm), and then looks at its consumer's
// bell: if the consumer armed it, the producer wakes it. The consumer
// arms the bell, looks once more, and sleeps. Each side stores, then loads
// what the other stores (Dekker's pattern): with an ordinary store the
// producer's load can pass its own store, still in its core's store
// buffer, and both sides miss the other, a wake-up lost until the
// sleeper's nap ends. A sequentially consistent store (an atomic exchange
// on amd64) forbids that, but it holds the producer until the line it
// stores to is its own again: the line its consumer just read, one trip
// between the cores (about 300 ns on the machine of docs/benchmarks.md,
// 2026-12-05), on every call.
//
// So the fence moves to the side that is rare: Publish is a release store
// (an ordinary MOV on amd64), and a consumer about to sleep calls
// SleepFence after arming its bell and before its last look, which makes
// every running thread of every process that registered (see
// EnableFastPublish) pass a full barrier (membarrier(2),
// MEMBARRIER_CMD_GLOBAL_EXPEDITED). A producer's store made before that
// barrier is visible to the consumer's last look; one made after it comes
// after the consumer's arming, and the producer's look at the bell, which
// follows its store, sees the bell armed.
//
// Every process of a job registers alike (the same kernel, the same
// launcher). Where membarrier is refused, or on other architectures,
// Publish is sequentially consistent and SleepFence does nothing.
//
// The rings still publish with atomic stores: a ring's Commit and Consume
// through Publish measured the same (docs/benchmarks.md), their cost
// being the software around them, and a sleep of the hub's progress
// goroutine would have paid the barrier.

// The commands of linux/membarrier.h, which golang.org/x/sys/unix does not
// name.
const (
	membarrierQuery                   = 0
	membarrierGlobalExpedited         = 1 << 1
	membarrierRegisterGlobalExpedited = 1 << 2
)

var (
	fastPublish     atomic.Bool
	fastPublishOnce sync.Once
)

// EnableFastPublish registers this process for the barrier SleepFence asks
// of it, and makes Publish a release store from then on; it reports
// whether it did (false: membarrier is refused here, or this architecture
// has no cheaper store; Publish stays sequentially consistent). A process
// calls it once, before it maps any memory it publishes into; later calls
// return the first's answer.
func EnableFastPublish() bool {
	fastPublishOnce.Do(func() {
		if haveReleaseStore && registerMembarrier() {
			fastPublish.Store(true)
		}
	})
	return fastPublish.Load()
}

// Publish stores v in *w for another process to read: after every store
// this goroutine made before it, and, where EnableFastPublish succeeded,
// without waiting for the line (see above). A producer that publishes
// and then rings a bell relies on its consumers calling SleepFence.
func Publish(w *atomic.Uint64, v uint64) {
	if fastPublish.Load() {
		storeRelease(w, v)
		return
	}
	w.Store(v)
}

// SleepFence is the barrier a consumer runs after it arms its bell and
// before its last look for work: every store another registered process
// published before the call is visible after it. It costs an
// inter-processor interrupt to each core running such a process (a few
// microseconds), paid once per sleep. Where fast publishing is off it does
// nothing: Arm's atomic operation is the fence then.
func SleepFence() {
	if fastPublish.Load() {
		membarrierGlobal()
	}
}
