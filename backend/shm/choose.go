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
// faster, trying the other every exploreEvery messages so that a change
// of the machine's mood is seen.
//
// A pull's rate is its bytes over the time of the copy. A pipelined
// message's rate is the bytes of its DATA after the first chunk over the
// time from the first chunk's arrival to the last's: the stream's pace,
// which a receiver that takes a window of messages sees back to back.
// Either rate is a moving average.
type chooser struct {
	mu    sync.Mutex
	rate  [2]float64 // bytes per ns: [ways pulled, ways pipelined]; 0 while unmeasured
	count uint64     // choices made

	// The pipelined message whose DATA is arriving; under the link's rmu.
	rid         uint64
	first, last time.Time
	bytes       int64
}

const (
	wayPull = iota
	wayPipelined
)

// exploreEvery is how often the slower way is tried: once in this many
// large messages (a cost of at most a sixty-fourth of them).
const exploreEvery = 64

// minMeasure is the fewest bytes a measurement must cover to count: a
// shorter one is mostly the cost of starting it.
const minMeasure = 128 << 10

// pull reports whether the receiver should pull the next large message.
func (c *chooser) pull() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count++
	switch {
	case c.rate[wayPull] == 0:
		return true
	case c.rate[wayPipelined] == 0:
		return false
	}
	faster := c.rate[wayPull] >= c.rate[wayPipelined]
	if c.count%exploreEvery == 0 {
		return !faster
	}
	return faster
}

// observe folds one measurement of way into its average.
func (c *chooser) observe(way int, n int64, d time.Duration) {
	if n < minMeasure || d <= 0 {
		return
	}
	r := float64(n) / float64(d.Nanoseconds())
	c.mu.Lock()
	if old := c.rate[way]; old == 0 {
		c.rate[way] = r
	} else {
		c.rate[way] = old + (r-old)/4
	}
	c.mu.Unlock()
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
