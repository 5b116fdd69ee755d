package nccl

import "time"

// Timing of the communicator's own polling.
const (
	// spinFor is how long Wait polls the GPU from the waiting goroutine
	// before it sleeps (and the progress goroutine polls, every 10 to
	// 500 µs): long enough that transfers of gigabytes are seen done
	// within a microsecond or so, short enough not to burn a core for
	// long on a wait for a slow peer. (At 20 ms, 64 messages of 128 MiB,
	// 24 ms on 2 H200s, were seen done up to 0.5 ms late: 1-2 % of their
	// bandwidth. C's cudaStreamSynchronize spins without end.)
	spinFor = 250 * time.Millisecond
	// minPoll and maxPoll bound the progress goroutine's polling interval
	// (it backs off from the first to the second while work is in flight).
	minPoll = 10 * time.Microsecond
	maxPoll = 500 * time.Microsecond
	// lostGrace is how long operations already on the GPU with a rank that
	// left get to finish before the communicator is aborted for them: a
	// rank that sent its last message and closed has delivered it, and the
	// receive completes on its own.
	lostGrace = 500 * time.Millisecond
	// abortBound is how long an ncclCommAbort may take before courier
	// stops waiting for it (it goes on in the background). An abort frees
	// the communicator's device memory, and freeing device memory waits
	// for every kernel on the GPU, including another channel's receive
	// that waits for a peer (measured: an abort of one channel hung while
	// the other channel's receive was pending). So courier aborts the
	// channels that must go at once, each on a thread of its own, and
	// tells the peers first, so that they abort their side.
	abortBound = 10 * time.Second
	// asyncCheckPolls is how often (in polls of its groups) a channel with
	// work on the GPU asks NCCL for an asynchronous error while nothing is
	// being launched: every 0.1 ms or so while a waiter spins, every 0.5 s
	// or so when only the progress goroutine polls.
	asyncCheckPolls = 1024
	// spinClock and spinYield: a spinning waiter reads the clock (for its
	// deadline and spinFor) every spinClock polls, and lets other
	// goroutines run every spinYield polls. Both cost as much as a poll.
	spinClock = 32
	spinYield = 64
	// stageCap bounds the host memory a channel stages at once (pinned
	// and device copies of host buffers): a flush of many large host
	// messages issues them in groups of about this much, each once the
	// earlier ones are done, instead of all at once. A single larger
	// message still goes, alone.
	stageCap = 256 << 20
)
