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
// faster, separately for each class of sizes (a pull's rate falls with
// the size faster than the pipeline's: pages pinned, caches missed).
//
// What a message costs either way: the time from when it could begin to
// its end (a pull's copy done, a pipelined message's last chunk arrived).
// It could begin when its RTS was written (the sender stamps it) or its
// receive was posted, whichever came later, but not before the end of the
// message before it on the link. So in a stream, where the RTSs wait in
// the ring, a message costs the time from one end to the next, the
// hand-shakes, the completions and the ring's stalls counted; in a
// ping-pong, its own round of hand-shakes and copies, the peer's turn left
// out (the RTS it answers was written after that turn). A pipelined
// message whose DATA waited while pulls ran (a window that holds both
// ways) is timed from the last pull's end. The clock is the wall clock,
// which every process of the host reads alike.
//
// A sample is the bytes of a few measurements of a way over their time
// (sampleMax of them, or fewer that make sampleBytes, at least sampleMin);
// a way's rate is the median of its last three samples, so that one
// stretch of a stalled virtual machine does not decide.
//
// Each class chooses by epochs. It starts with the verdict of the nearest
// class that has one, else the pipeline (it needs nothing cold to start),
// for exploreMin epochs: a short run of large messages, a ping-pong of a
// few, is not worth an exploration (a pull's first copies ran at a fifth
// of its warm rate, and a way left goes cold). Then an exploring epoch of
// the other way, just long enough for a sample; then the verdict, the
// other way only if it is flipFactor faster. The way not taken is explored
// again after exploreMin epochs, then twice as many each time it stays
// slower, up to exploreMax (at most a few percent of the messages at
// first, a thousandth once settled). The way flips only on an
// exploration's sample flipFactor faster than the way taken: when the way
// taken slows down so that the other's older rate looks faster, the other
// is explored at once, not taken (a stall of the machine slows both
// alike). The first measurement of a way after the other ran is left out,
// and the first sample's worth of a class's first epoch (fresh pages, cold
// code). Every switch costs: on a 2-core virtual machine, 4 MiB messages
// one way took 280 µs with these constants and 970 µs with a chooser that
// explored from the start and flipped on any lead (docs/benchmarks.md).
type chooser struct {
	mu    sync.Mutex
	class [sizeClasses]classChoice

	// The pipelined messages matched whose DATA has not begun, in the
	// order their CTS left (the order of their DATA); skip counts first
	// chunks to pass over after the queue overflowed.
	pend       [pendMax]pending
	head, npen int
	skip       int

	// The pipelined message whose DATA is arriving.
	cur   pending
	curOn bool
	rid   uint64 // its receiver's id (the DATA's Seq)
	got   int64  // its bytes arrived

	// The pull chosen last, for Pull: its bytes and when it could begin.
	pullN, pullReady int64

	prevEnd int64 // the last end of a message the chooser sent either way (wall ns)

	// split says the link's pulls are split with the sender (split.go):
	// then a class starts by its size, not its neighbours (hint).
	split bool
}

// pending is a pipelined message matched: its bytes, its size class, and
// when it could begin (wall ns).
type pending struct {
	n     int64
	class uint8
	ready int64
}

// classChoice is one class of sizes' state: its epochs, and the
// measurements and samples of each way.
type classChoice struct {
	way     int    // this epoch's way
	first   int    // the way the class starts with
	left    int    // messages left in this epoch
	epochs  uint64 // epochs begun
	settled bool   // both ways sampled and compared: faster is the verdict
	faster  int
	explore uint64 // epochs from one exploring epoch to the next
	next    uint64 // the epoch that explores next
	cold    [2]int // measurements of each way still to leave out

	acc     [2]accum      // each way's measurements toward its next sample
	samples [2][3]float64 // each way's last samples, bytes per ns
	nsample [2]int        // samples taken of each way
}

// accum sums the measurements of one sample.
type accum struct {
	bytes int64
	d     time.Duration
	k     int
}

const (
	wayPull = iota
	wayPipelined
)

// The chooser's constants: messages per epoch, or bytes for large messages
// (epochMsgs; an exploring epoch is one sample long, its cold measurement
// included), measurements per sample, the bounds of the interval between
// explorations (in epochs), and how much faster the other way must be to
// be taken.
const (
	epochLen    = 16
	epochBytes  = 16 << 20
	sampleMin   = 2
	sampleMax   = 8
	sampleBytes = 8 << 20
	exploreMin  = 16
	exploreMax  = 1024
	flipFactor  = 1.3
)

// sampleLen is how many messages of n bytes make a sample: an exploring
// epoch is one more (its cold measurement), and as many of a class's first
// messages are left out (their rate, fresh pages touched and cold code
// run, was a fifth of the warm one in a ping-pong and would decide for
// either way).
func sampleLen(n int64) int {
	return int(min(max((sampleBytes+n-1)/max(n, 1), sampleMin), sampleMax))
}

// epochMsgs is how many messages of n bytes make an epoch: epochLen, or
// fewer for messages of more than epochBytes / epochLen bytes, as many as
// make epochBytes, but at least a sample's. Counted in messages alone, a
// class of 64 MiB messages first explored the other way after 16 GiB: on
// the 16-core Intel host of docs/benchmarks.md, where the split pull
// moved 16 MiB messages at 17.8 GB/s and the pipeline at 10.2-11.4, a
// benchmark's 64 MiB stream never got there.
func epochMsgs(n int64) int {
	return int(max(min(epochLen, epochBytes/max(n, 1)), int64(sampleLen(n))))
}

// sizeClasses divides the sizes by powers of four: up to 128 KiB, 512 KiB,
// 2 MiB, 8 MiB, and above (the first class's messages are not split:
// split.go).
const sizeClasses = 5

// pendMax bounds the pipelined messages tracked between their match and
// their DATA.
const pendMax = 512

// sizeClass is the class of a message of n bytes.
func sizeClass(n int64) uint8 {
	if n <= 128<<10 {
		return 0
	}
	return uint8(min((bits.Len64(uint64(n-1))-16)/2, sizeClasses-1))
}

// pull reports whether the receiver should pull the next large message,
// of n bytes, which could begin at ready (wall ns).
func (c *chooser) pull(n, ready int64) bool {
	k := sizeClass(n)
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.class[k]
	if s.epochs == 0 {
		s.first = c.hint(int(k))
	}
	if s.left == 0 {
		s.begin(sampleLen(n), epochMsgs(n))
	}
	s.left--
	if s.way == wayPull {
		c.pullN, c.pullReady = n, ready
		return true
	}
	c.push(pending{n: n, class: k, ready: ready})
	return false
}

// hint is the way a class k that has seen no message starts with. Where
// pulls are split with the sender, by its size: the pull from splitFrom to
// the class of splitStartMax bytes, the pipeline elsewhere (on the 2-core
// AMD EPYC VM of docs/benchmarks.md the split pull moved 256 KiB to 4 MiB
// messages in a ping-pong and in a stream 1.3-1.9 × faster than the
// pipeline, 8 MiB ones about as fast, and 16 to 64 MiB ones 0.6-0.8 × as
// fast: there both copies of each byte go through memory, where the
// pipeline's second stays in the cache). Otherwise, the verdict of the nearest class that has one (switching ways
// costs: the way left goes cold), else the pipeline. Under mu.
func (c *chooser) hint(k int) int {
	if c.split {
		if k >= int(sizeClass(splitFrom)) && k <= int(sizeClass(splitStartMax)) {
			return wayPull
		}
		return wayPipelined
	}
	for d := 1; d < sizeClasses; d++ {
		for _, j := range [2]int{k - d, k + d} {
			if j >= 0 && j < sizeClasses && c.class[j].settled {
				return c.class[j].faster
			}
		}
	}
	return wayPipelined
}

// begin starts an epoch of epoch messages, which take sample measurements
// to make a sample: its way is the class's first way for exploreMin epochs
// and until it has a sample, then the other until it has one, then the
// verdict, or, when an exploration is due, the other way.
func (s *classChoice) begin(sample, epoch int) {
	s.epochs++
	way, length := s.faster, epoch
	other := 1 - s.first
	switch {
	case s.nsample[s.first] == 0 || s.nsample[other] == 0 && s.epochs <= exploreMin:
		way = s.first
	case s.nsample[other] == 0:
		way, length = other, sample+1
	case !s.settled:
		way = s.first
	case s.epochs >= s.next:
		way, length = 1-s.faster, sample+1
		s.next = s.epochs + s.explore
	}
	switch {
	case s.epochs == 1:
		s.cold[way] = sample
		length = max(length, 2*sample)
	case way != s.way:
		s.cold[way] = 1
	}
	s.way, s.left = way, length
}

// push queues a pipelined message matched; under mu. When the queue is
// full, it and what it holds are forgotten: their first chunks are passed
// over.
func (c *chooser) push(p pending) {
	if c.npen == pendMax {
		c.skip += c.npen + 1
		c.head, c.npen = 0, 0
		return
	}
	c.pend[(c.head+c.npen)%pendMax] = p
	c.npen++
}

// data notes a DATA record of a pipelined message as it arrives; under
// the link's rmu. A first chunk begins the oldest message queued; the
// chunk that completes its bytes ends it, and measures it.
func (c *chooser) data(h *engine.Header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.SID == 0 {
		c.curOn = false
		if c.skip > 0 {
			c.skip--
			return
		}
		if c.npen == 0 {
			return // not a message the chooser sent this way
		}
		c.cur = c.pend[c.head]
		c.head = (c.head + 1) % pendMax
		c.npen--
		c.curOn, c.rid, c.got = true, h.Seq, 0
	}
	if !c.curOn || h.Seq != c.rid {
		return
	}
	c.got += h.Count
	if c.got < c.cur.n {
		return
	}
	c.curOn = false
	if c.got > c.cur.n {
		return // not the message queued: leave it out
	}
	now := time.Now().UnixNano() // only at a message's end: not a clock read a chunk
	start := max(c.cur.ready, c.prevEnd)
	c.prevEnd = max(c.prevEnd, now)
	c.observe(wayPipelined, c.cur.class, c.cur.n, time.Duration(now-start))
}

// pulled notes a pull of n bytes done at end (wall ns).
func (c *chooser) pulled(n, end int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n != c.pullN {
		c.prevEnd = max(c.prevEnd, end)
		return // not the pull chosen last (another goroutine's)
	}
	start := max(c.pullReady, c.prevEnd)
	c.prevEnd = max(c.prevEnd, end)
	c.observe(wayPull, sizeClass(n), n, time.Duration(end-start))
}

// observe folds one measurement of way into its class's next sample, and
// when that is complete, the sample into the way's rate and the verdict;
// under mu.
func (c *chooser) observe(way int, k uint8, n int64, d time.Duration) {
	s := &c.class[k]
	if d <= 0 || n <= 0 {
		return
	}
	if s.cold[way] > 0 {
		s.cold[way]--
		return
	}
	a := &s.acc[way]
	a.bytes += n
	a.d += d
	a.k++
	if a.k < sampleMax && (a.k < sampleMin || a.bytes < sampleBytes) {
		return
	}
	r := float64(a.bytes) / float64(a.d.Nanoseconds())
	s.samples[way][s.nsample[way]%3] = r
	s.nsample[way]++
	*a = accum{}
	s.judge(way, r)
}

// judge updates the verdict after a sample of way, at rate r.
func (s *classChoice) judge(way int, r float64) {
	if s.nsample[wayPull] == 0 || s.nsample[wayPipelined] == 0 {
		return
	}
	if !s.settled {
		s.settled, s.faster = true, s.first
		if s.rate(1-s.first) > flipFactor*s.rate(s.first) {
			s.faster = 1 - s.first
		}
		s.explore, s.next = exploreMin, s.epochs+exploreMin
		return
	}
	other := 1 - s.faster
	switch {
	case way == other && r > flipFactor*s.rate(s.faster):
		// An exploration found the other way faster: a new verdict, and
		// a look back soon.
		s.faster = other
		s.explore, s.next = exploreMin, s.epochs+exploreMin
	case way == other:
		// An exploration found the other way slower still.
		s.explore = min(2*s.explore, exploreMax)
	case s.rate(other) > flipFactor*s.rate(s.faster):
		// The way taken slowed down: explore the other now.
		s.next = min(s.next, s.epochs+1)
	}
}

// rate is way's rate in bytes per ns: the median of its last three
// samples (the mean of two, or the one); 0 while unsampled.
func (s *classChoice) rate(way int) float64 {
	v := s.samples[way]
	switch s.nsample[way] {
	case 0:
		return 0
	case 1:
		return v[0]
	case 2:
		return (v[0] + v[1]) / 2
	}
	return max(min(v[0], v[1]), min(max(v[0], v[1]), v[2]))
}

// rates returns the two rates of n bytes' class, in bytes per ns (0:
// unsampled), for tests and reports.
func (c *chooser) rates(n int64) (pull, pipelined float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.class[sizeClass(n)]
	return s.rate(wayPull), s.rate(wayPipelined)
}
