//go:build linux

package shm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
)

// TestCopyAuto: by default every large message is offered for pulling
// where the peer can read this rank's memory; the receiver pulls a
// collective's (a negative tag) and chooses for a user's: the pipeline
// first, then, after exploreMin epochs, an exploring epoch of pulls; both
// ways are then measured, and every message arrives whole.
func TestCopyAuto(t *testing.T) {
	e, h := pairCopy(t, CopyAuto)
	buf := make([]byte, 1<<20)
	canRead := h[1].links[0].read.Load()
	_, ok := h[0].links[0].PullAddr(buf, 3)
	assert.Equal(t, canRead, ok, "a user's message: offered for pulling when the peer can read")
	_, ok = h[0].links[0].PullAddr(buf, -3)
	assert.Equal(t, canRead, ok, "a collective's message: offered for pulling when the peer can read")
	assert.Equal(t, canRead, h[1].links[0].WantPull(1<<20, -3, false), "a collective's message is pulled")
	const n = 128 << 10 // the first class: not split, so it starts on the pipeline
	sizes := []int{maxEager + 1, 3 << 20}
	for range (exploreMin+2)*epochLen + sampleMax + 1 {
		sizes = append(sizes, n)
	}
	exchange(t, e, sizes)
	if !canRead {
		t.Skip("this kernel refuses process_vm_readv between these processes: only the pipelined way")
	}
	pull, pipe := h[1].links[0].choose.rates(n)
	assert.Positive(t, pipe, "the receiver measured pipelined messages")
	assert.Positive(t, pull, "the receiver measured pulls")
}

// TestChooserEpochs: a class's choice between pulling and pipelining goes
// by epochs: the pipeline until it has a sample and exploreMin epochs have
// passed, then an exploring epoch of pulls; then the faster way, explored
// at growing intervals; only an exploration flipFactor faster flips it,
// and a way taken that slows down brings the next exploration forward.
func TestChooserEpochs(t *testing.T) {
	const n = 1 << 20
	k := sizeClass(n)
	sample := sampleLen(n)
	var c chooser
	s := &c.class[k]
	choose := func(m int) (pulls int) {
		for range m {
			if c.pull(n, 0) {
				pulls++
			}
		}
		return pulls
	}
	// Rates in bytes per ns: a message of n bytes measured over d.
	at := func(rate float64) time.Duration { return time.Duration(float64(n) / rate) }
	feed := func(way int, rate float64, m int) {
		for range m {
			c.observe(way, k, n, at(rate))
		}
	}

	require.Zero(t, choose(100), "nothing measured: the pipeline")
	feed(wayPipelined, 20, sample) // the first epoch's warm-up: left out
	require.Zero(t, s.nsample[wayPipelined])
	feed(wayPipelined, 20, sample)
	require.Equal(t, 1, s.nsample[wayPipelined])
	assert.InDelta(t, 20, s.rate(wayPipelined), 0.5)

	// 100 messages made 6 epochs and 4 of the 7th: the pipeline goes on to
	// the end of epoch exploreMin, and the next explores the pull, for one
	// sample and its cold measurement.
	require.Zero(t, choose(exploreMin*epochLen-100), "the pipeline for exploreMin epochs")
	require.Equal(t, sample+1, choose(sample+1), "an exploring epoch of pulls")
	feed(wayPull, 10, 1+sample) // cold, then a sample at half the rate
	require.True(t, s.settled)
	require.Equal(t, wayPipelined, s.faster)
	assert.InDelta(t, 10, s.rate(wayPull), 0.5)
	require.Zero(t, choose(epochLen), "then the pipeline again")

	// The next exploration comes exploreMin epochs after the verdict.
	pulls := 0
	epochs := 0
	for pulls == 0 {
		pulls = choose(epochLen)
		epochs++
		require.LessOrEqual(t, epochs, exploreMin+1, "an exploration within exploreMin epochs")
	}
	assert.Equal(t, sample+1, pulls+choose(sample+1-pulls), "an exploring epoch of pulls")

	// It finds the pull slower still: the interval doubles.
	feed(wayPull, 10, 1+sample)
	assert.Equal(t, uint64(2*exploreMin), s.explore)
	assert.Equal(t, wayPipelined, s.faster)

	// An exploration only 1.1 × faster does not flip the way (flipFactor
	// is 1.3).
	feed(wayPull, 22, 1+sample)
	assert.Equal(t, wayPipelined, s.faster, "within flipFactor: no flip")
	// One 2 × faster does, and the explorations start close again.
	feed(wayPull, 40, 1+sample)
	assert.Equal(t, wayPull, s.faster)
	assert.Equal(t, uint64(exploreMin), s.explore)
	assert.Equal(t, s.epochs+exploreMin, s.next)

	// The way taken (now the pull) slows down below the other's rate: no
	// flip, but the next epoch explores.
	feed(wayPull, 5, 3*sample)
	assert.Equal(t, wayPull, s.faster, "a slowed way is not left on old rates")
	assert.Equal(t, s.epochs+1, s.next, "the other way is explored next")
	choose(s.left) // the epoch under way ends
	assert.Zero(t, choose(sample+1), "the exploring epoch takes the pipeline")

	// Other classes are untouched; one that has seen no message starts
	// with the nearest class's verdict.
	p, q := c.rates(64 << 20)
	assert.Zero(t, p)
	assert.Zero(t, q)
	require.Equal(t, wayPull, s.faster)
	assert.True(t, c.pull(64<<20, 0), "the 1 MiB class's verdict: the pull")
	assert.Equal(t, wayPull, c.class[sizeClass(64<<20)].first)
	var fresh chooser
	assert.False(t, fresh.pull(64<<20, 0), "no verdict anywhere: the pipeline")
}

// TestChooserTiming: what a message costs is the time from when it could
// begin (its RTS, or its receive's posting) to its end, but not from
// before the message ahead of it ended; a pipelined message ends with the
// chunk that completes its bytes.
func TestChooserTiming(t *testing.T) {
	const n = 1 << 20
	const chunk = 256 << 10
	k := sizeClass(n)
	now := time.Now().UnixNano()
	sec := int64(time.Second)
	stream := func(c *chooser, rid uint64, n int64) {
		for off := int64(0); off < n; off += chunk {
			c.data(&engine.Header{Kind: engine.KindData, Seq: rid, SID: uint64(off), Count: min(chunk, n-off)})
		}
	}
	last := func(c *chooser, way int) time.Duration {
		a := c.class[k].acc[way]
		require.Equal(t, 1, a.k, "one measurement")
		return a.d
	}

	// A ping-pong: the RTS came after the message before ended.
	var c chooser
	c.prevEnd = now - 10*sec
	c.push(pending{n: n, class: k, ready: now - sec})
	c.data(&engine.Header{Kind: engine.KindData, Seq: 7, SID: 0, Count: chunk})
	assert.Zero(t, c.class[k].acc[wayPipelined].k, "measured at the last chunk, not before")
	for off := int64(chunk); off < n; off += chunk {
		c.data(&engine.Header{Kind: engine.KindData, Seq: 7, SID: uint64(off), Count: chunk})
	}
	d := last(&c, wayPipelined)
	assert.GreaterOrEqual(t, d, time.Second)
	assert.Less(t, d, 10*time.Second, "timed from the RTS, not from the message before")
	assert.Greater(t, c.prevEnd, now)

	// A stream: the RTS waited while the message before moved.
	c = chooser{}
	c.prevEnd = now - sec
	c.push(pending{n: n, class: k, ready: now - 10*sec})
	stream(&c, 8, n)
	d = last(&c, wayPipelined)
	assert.GreaterOrEqual(t, d, time.Second)
	assert.Less(t, d, 10*time.Second, "timed from the message before's end, not the RTS")

	// A pull, the same way.
	c = chooser{}
	c.prevEnd = now - sec
	c.class[k].left = 1
	c.class[k].way = wayPull
	require.True(t, c.pull(n, now-10*sec))
	c.pulled(n, now)
	assert.Equal(t, time.Second, last(&c, wayPull))
	assert.Equal(t, now, c.prevEnd)

	// DATA whose chunks pass the bytes of the message queued is not that
	// message.
	c = chooser{}
	c.push(pending{n: n - 100, class: k, ready: now - sec})
	stream(&c, 9, n)
	assert.Zero(t, c.class[k].acc[wayPipelined].k, "no measurement")

	// DATA with no message queued (the chooser did not send it that way)
	// is not measured; when the queue overflows, the first chunks of what
	// it held and of the message that overflowed it are passed over.
	c = chooser{}
	stream(&c, 10, n)
	assert.Zero(t, c.class[k].acc[wayPipelined].k)
	for range pendMax + 1 {
		c.push(pending{n: n, class: k, ready: now - sec})
	}
	assert.Equal(t, pendMax+1, c.skip)
	assert.Zero(t, c.npen)
	c.push(pending{n: n, class: k, ready: now - sec})
	for i := range pendMax + 1 {
		stream(&c, uint64(100+i), n)
	}
	assert.Zero(t, c.class[k].acc[wayPipelined].k, "passed over")
	stream(&c, 99, n)
	assert.Equal(t, 1, c.class[k].acc[wayPipelined].k, "the message queued after the overflow")
}

// TestSizeClass: sizes are classed by powers of four from 128 KiB, and a
// sample is 8 MiB's worth of messages, 2 to 8 of them.
func TestSizeClass(t *testing.T) {
	for n, want := range map[int64]uint8{
		64<<10 + 1: 0, 128 << 10: 0, 128<<10 + 1: 1, 512 << 10: 1, 512<<10 + 1: 2,
		2 << 20: 2, 2<<20 + 1: 3, 8 << 20: 3, 8<<20 + 1: 4, 1 << 40: 4,
	} {
		assert.Equal(t, want, sizeClass(n), "%d bytes", n)
	}
	for n, want := range map[int64]int{64 << 10: 8, 1 << 20: 8, 2 << 20: 4, 4 << 20: 2, 64 << 20: 2, 3 << 20: 3} {
		assert.Equal(t, want, sampleLen(n), "%d bytes", n)
	}
}

// TestPulledRTSRecord: a pulled RTS's record carries the address and the
// wall clock's time it was written.
func TestPulledRTSRecord(t *testing.T) {
	h := engine.Header{Kind: engine.KindRTS, Type: backend.Uint8, Flags: engine.RTSPull, Count: 1 << 20, SID: 1, Addr: 0x7f0000001000}
	b := make([]byte, recordLen(&h, 0))
	before := time.Now().UnixNano()
	encode(b, &h, nil, false)
	after := time.Now().UnixNano()
	var got engine.Header
	var src record
	require.NoError(t, decode(b, 1<<16, &got, &src))
	assert.Equal(t, h.Addr, got.Addr)
	assert.GreaterOrEqual(t, src.sent, before)
	assert.LessOrEqual(t, src.sent, after)
	require.Error(t, decode(b[:len(b)-1], 1<<16, &got, &src), "a record cut short")
}
