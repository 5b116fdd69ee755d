package shm

import (
	"math/bits"
	"sync"
	"time"

	"github.com/courier-mp/courier/internal/engine"
)

// chooser decides, per large user message under CopyAuto, how the
// receiver takes it: pulled out of the sender's memory (one copy, by the
// receiver alone) or pipelined through the ring (two copies, both ranks
// copying at once). Which is faster depends on the machine, and on a
// virtual one on where its cores sit at the moment: two cores that share a
// cache hand the ring's lines to each other quickly and the pipeline wins
// (2.5 × the pull on an AMD EPYC host), two that do not move each line
// across the chip and the single copy wins (2-3 × on another); measured
// in docs/benchmarks.md, "The copy of large messages, chosen as they
// move". So the receiver measures both as messages move and takes the
// faster.
//
// It chooses per epoch of epochLen messages, so that a way is measured
// warm, in a run of its own: the first measurement of a way after the
// other ran is left out (a pull after a stream of pipelined messages
// pins pages and runs code that have gone cold, and ran at a fifth of its
// warm rate). Now and then an epoch takes the slower way, to see whether
// the machine has changed: after exploreMin epochs or more, as many as
// keep the cost of exploring within exploreCost (exploreAfter), then
// twice as many each time the slower way stays slower, up to exploreMax
// (a cost of a sixty-fourth of the messages at most, once settled); when the other way
// turns out faster by flipMargin, the choice flips and the explorations
// start close together again. Each class of message sizes (copyClass)
// is measured and chosen for on its own.
//
// A way's rate is a message's bytes over the time from the completion of
// the message before it, when that one took the same way (complete): a
// pull completes when its copy ends, a pipelined message when its last
// chunk arrives (measured when the next pipelined message starts). So a
// window of messages is measured at the pace the receiver takes them,
// hand-shakes included, and a ping-pong at its round trip, the same for
// both ways. Either rate is a moving average.
type chooser struct {
	mu    sync.Mutex
	class [copyClasses]choice // by message size (copyClass)

	// The pipelined message whose DATA is arriving; under the link's rmu.
	rid   uint64
	last  time.Time // its last chunk's arrival so far (zero: none)
	bytes int64     // its chunks' bytes so far
}

// choice is the chooser's state for one class of message sizes: the two
// ways' rates are measured and compared per class, since they move apart
// with the size (on the AMD VM of docs/benchmarks.md a pull moved 23 GB/s
// at 1 MiB and 9 at 16 MiB, the pipeline 25-28 at both), and one average
// over every size let a run of 1 MiB messages decide for 16 MiB ones, or
// flip the choice back and forth.
type choice struct {
	rate    [2]float64 // bytes per ns: [ways pulled, ways pipelined]; 0 while unmeasured
	count   uint64     // choices made
	way     int        // this epoch's way
	epochs  uint64     // epochs begun
	explore uint64     // epochs from one exploring epoch to the next
	next    uint64     // the epoch that explores next
	cold    [2]int     // measurements of each way still to leave out
	faster  int        // the faster way, once both are measured
	done    time.Time  // the last message's completion (zero: none yet)
	doneWay int        // the way it took
}

const (
	wayPull = iota
	wayPipelined
)

// The chooser's epochs: messages per epoch, and the bounds of the
// interval between explorations, in epochs.
const (
	epochLen   = 16
	exploreMin = 4
	exploreMax = 64
)

// copyClasses is the number of size classes: up to 128 KiB, 512 KiB,
// 2 MiB, 8 MiB, and larger (copyClass).
const copyClasses = 5

// copyClass is the size class of a message of n bytes: a class spans a
// factor of four.
func copyClass(n int64) int {
	if n <= 1 {
		return 0
	}
	return min(bits.Len64(uint64(n-1)>>16)/2, copyClasses-1)
}

// flipMargin is how much faster the way not taken must have measured to
// displace the one taken: with two rates within a few percent of each
// other (on that VM, the pull's 23 GB/s against the pipeline's 27 at
// 1 MiB), every noisy measurement flipped the choice, and each flip
// brought the explorations close together again: a quarter of the
// messages were pulled, at 0.5-0.7 × the pipeline's pace.
const flipMargin = 1.15

// coldMeasures is how many measurements of a way are left out after the
// other way ran (the first message of a run gives none): a pull's first;
// for the pipeline, the first two, the first of which may still have
// queued behind the other way's messages.
var coldMeasures = [2]int{wayPull: 1, wayPipelined: 2}

// minMeasure is the fewest bytes a measurement must cover to count: a
// shorter one is mostly the cost of starting it.
const minMeasure = 128 << 10

// pull reports whether the receiver should pull the next large message,
// of n bytes.
func (c *chooser) pull(n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := &c.class[copyClass(n)]
	if k.count%epochLen == 0 {
		k.begin()
	}
	k.count++
	return k.way == wayPull
}

// begin starts an epoch: its way is the one not measured yet, else the
// faster, else, when an exploration is due, the slower. Under mu.
func (k *choice) begin() {
	k.epochs++
	var way int
	switch {
	case k.rate[wayPull] == 0:
		way = wayPull
	case k.rate[wayPipelined] == 0:
		way = wayPipelined
	case k.epochs < k.next:
		way = k.faster
	default: // an exploration is due
		way = 1 - k.faster
		k.next = k.epochs + k.explore
		k.explore = min(2*k.explore, exploreMax)
	}
	if way != k.way || k.epochs == 1 {
		k.cold[way] = coldMeasures[way]
	}
	k.way = way
}

// complete measures a message of size bytes that way completed at t: its
// size over the time since the completion before it, if that message
// took the same way (the first of a run has nothing to measure from).
// Either way's rate is so measured end to end, its hand-shakes and
// the peer's part included: a pull's copy alone, timed by itself,
// measured 18 GB/s at 4 MiB on that VM where a stream of pulls moved
// 15-18 and the pipeline 21-26, and the chooser took the pull.
func (c *chooser) complete(way int, size int64, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := &c.class[copyClass(size)]
	prev, prevWay := k.done, k.doneWay
	k.done, k.doneWay = t, way
	if prev.IsZero() || prevWay != way || size < minMeasure {
		return
	}
	d := t.Sub(prev)
	if d <= 0 {
		return
	}
	r := float64(size) / float64(d.Nanoseconds())
	if k.cold[way] > 0 {
		k.cold[way]--
		return
	}
	if old := k.rate[way]; old == 0 {
		k.rate[way] = r
	} else {
		k.rate[way] = old + (r-old)/4
	}
	if k.rate[wayPull] == 0 || k.rate[wayPipelined] == 0 {
		return
	}
	faster := wayPipelined
	if k.rate[wayPull] >= k.rate[wayPipelined] {
		faster = wayPull
	}
	if k.explore != 0 && faster != k.faster && k.rate[faster] < flipMargin*k.rate[k.faster] {
		faster = k.faster // not by enough to flip
	}
	if faster != k.faster || k.explore == 0 {
		// A new verdict: look again soon, the sooner the closer the two
		// rates are.
		k.faster, k.explore = faster, exploreAfter(k.rate[faster]/k.rate[1-faster])
		k.next = k.epochs + k.explore
	}
}

// exploreAfter is the number of epochs to the first exploration after a
// new verdict whose faster way measured ratio × the slower: an exploring
// epoch costs ratio − 1 epochs' time, so the first comes after
// (ratio − 1) / exploreCost epochs, exploreMin at least: the slower way
// then costs no more than exploreCost of the time, and less as the
// intervals grow. With the first after 4 epochs whatever the ratio, a
// pull 2.5 × slower than the pipeline took a quarter of a short run's
// messages (docs/benchmarks.md, "The chooser by size").
func exploreAfter(ratio float64) uint64 {
	n := (ratio - 1) / exploreCost
	if !(n < exploreMax) { // NaN too
		return exploreMax
	}
	return max(exploreMin, uint64(n))
}

// exploreCost bounds the share of a link's time its explorations take at
// the first interval after a new verdict.
const exploreCost = 0.1

// data notes a DATA record of a pipelined message as it arrives; under
// the link's rmu. When a new message's first chunk comes, the last one
// is measured as completed at its last chunk's arrival.
func (c *chooser) data(h *engine.Header) {
	now := time.Now()
	if h.SID == 0 {
		c.flush()
		c.rid, c.last, c.bytes = h.Seq, now, h.Count
		return
	}
	if h.Seq != c.rid || c.last.IsZero() {
		return
	}
	c.last = now
	c.bytes += h.Count
}

// flush measures the message that data followed, if any; under rmu.
func (c *chooser) flush() {
	if !c.last.IsZero() {
		c.complete(wayPipelined, c.bytes, c.last)
	}
	c.last = time.Time{}
}

// rates returns the two averages for messages of n bytes, in bytes per ns
// (0: unmeasured), for tests and reports.
func (c *chooser) rates(n int64) (pull, pipelined float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := &c.class[copyClass(n)]
	return k.rate[wayPull], k.rate[wayPipelined]
}
