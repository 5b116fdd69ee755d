package nccl

import "time"

// Timing of the communicator's own polling, and the bounds it keeps.
// docs/nccl-tuning.md says why each has its value: what was measured, and
// what it trades.
const (
	// spinFor is how long Wait polls the GPU from the waiting goroutine
	// before it sleeps (the progress goroutine then polls, every minPoll
	// to maxPoll).
	spinFor = 250 * time.Millisecond
	// minPoll and maxPoll bound the progress goroutine's polling interval
	// (it backs off from the first to the second while work is in flight).
	minPoll = 10 * time.Microsecond
	maxPoll = 500 * time.Microsecond
	// lostGrace is how long operations already on the GPU with a rank that
	// left get to finish before the communicator is aborted for them.
	lostGrace = 500 * time.Millisecond
	// abortBound is how long an ncclCommAbort may take before courier
	// stops waiting for it (it goes on in the background).
	abortBound = 10 * time.Second
	// asyncCheckPolls is how often (in polls of its groups) a channel with
	// work on the GPU asks NCCL for an asynchronous error while nothing is
	// being launched.
	asyncCheckPolls = 1024
	// spinClock and spinYield: a spinning waiter reads the clock (for its
	// deadline and spinFor) every spinClock polls, and lets other
	// goroutines run every spinYield polls.
	spinClock = 32
	spinYield = 64
	// stageCap bounds the host memory a channel stages at once (pinned
	// and device copies of host buffers): a flush of many large host
	// messages issues them in groups of about this much, each once the
	// earlier ones are done, instead of all at once. A single larger
	// message still goes, alone.
	stageCap = 256 << 20
	// splitBound bounds Split: the members' hellos and the creation and
	// first contact of the derived communicator's channels.
	splitBound = 2 * time.Minute
)
