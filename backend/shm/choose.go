package shm

import (
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
// the machine has changed: after exploreMin epochs, then twice as many
// each time the slower way stays slower, up to exploreMax (a cost of a
// sixty-fourth of the messages at most, once settled); when the other way
// turns out faster, the choice flips and the explorations start close
// together again.
//
// A pull's rate is its bytes over the time of the copy. A pipelined
// message's rate is the bytes of its DATA after the first chunk over the
// time from the first chunk's arrival to the last's: the stream's pace,
// which a receiver that takes a window of messages sees back to back; it
// is measured when the next pipelined message starts. Either rate is a
// moving average.
type chooser struct {
	mu      sync.Mutex
	rate    [2]float64 // bytes per ns: [ways pulled, ways pipelined]; 0 while unmeasured
	count   uint64     // choices made
	way     int        // this epoch's way
	epochs  uint64     // epochs begun
	explore uint64     // epochs from one exploring epoch to the next
	next    uint64     // the epoch that explores next
	cold    [2]int     // measurements of each way still to leave out
	faster  int        // the faster way, once both are measured

	// The pipelined message whose DATA is arriving; under the link's rmu.
	rid         uint64
	first, last time.Time
	bytes       int64
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

// coldMeasures is how many measurements of a way are left out after the
// other way ran: a pull's first; for the pipeline, the message left over
// from its last run (measured only when the next one starts) and the
// first of the new run.
var coldMeasures = [2]int{wayPull: 1, wayPipelined: 2}

// minMeasure is the fewest bytes a measurement must cover to count: a
// shorter one is mostly the cost of starting it.
const minMeasure = 128 << 10

// pull reports whether the receiver should pull the next large message.
func (c *chooser) pull() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.count%epochLen == 0 {
		c.begin()
	}
	c.count++
	return c.way == wayPull
}

// begin starts an epoch: its way is the one not measured yet, else the
// faster, else, when an exploration is due, the slower. Under mu.
func (c *chooser) begin() {
	c.epochs++
	var way int
	switch {
	case c.rate[wayPull] == 0:
		way = wayPull
	case c.rate[wayPipelined] == 0:
		way = wayPipelined
	case c.epochs < c.next:
		way = c.faster
	default: // an exploration is due
		way = 1 - c.faster
		c.next = c.epochs + c.explore
		c.explore = min(2*c.explore, exploreMax)
	}
	if way != c.way || c.epochs == 1 {
		c.cold[way] = coldMeasures[way]
	}
	c.way = way
}

// observe folds one measurement of way into its average.
func (c *chooser) observe(way int, n int64, d time.Duration) {
	if n < minMeasure || d <= 0 {
		return
	}
	r := float64(n) / float64(d.Nanoseconds())
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cold[way] > 0 {
		c.cold[way]--
		return
	}
	if old := c.rate[way]; old == 0 {
		c.rate[way] = r
	} else {
		c.rate[way] = old + (r-old)/4
	}
	if c.rate[wayPull] == 0 || c.rate[wayPipelined] == 0 {
		return
	}
	faster := wayPipelined
	if c.rate[wayPull] >= c.rate[wayPipelined] {
		faster = wayPull
	}
	if faster != c.faster || c.explore == 0 {
		// A new verdict: look again soon.
		c.faster, c.explore = faster, exploreMin
		c.next = c.epochs + exploreMin
	}
}

// data notes a DATA record of a pipelined message as it arrives; under
// the link's rmu. When a new message's first chunk comes, the last one's
// stream is measured.
func (c *chooser) data(h *engine.Header) {
	now := time.Now()
	if h.SID == 0 {
		c.flush()
		c.rid, c.first, c.last, c.bytes = h.Seq, now, now, 0
		return
	}
	if h.Seq != c.rid || c.first.IsZero() {
		return
	}
	c.last = now
	c.bytes += h.Count
}

// flush measures the stream that data followed, if any; under rmu.
func (c *chooser) flush() {
	if !c.first.IsZero() {
		c.observe(wayPipelined, c.bytes, c.last.Sub(c.first))
	}
	c.first = time.Time{}
}

// rates returns the two averages, in bytes per ns (0: unmeasured), for
// tests and reports.
func (c *chooser) rates() (pull, pipelined float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rate[wayPull], c.rate[wayPipelined]
}
