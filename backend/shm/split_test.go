//go:build linux

package shm

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
)

// splitSizes are pulled messages: one too small to split, the smallest
// split, one of two unequal chunks, and some of several with a short last
// chunk.
var splitSizes = []int{splitFrom - 1, splitFrom, 300001, 1 << 20, 3<<20 + 123}

// needSingleCopy skips a test where the kernel refuses process_vm_readv
// between the pair's processes.
func needSingleCopy(t *testing.T, h [2]*Hub) {
	t.Helper()
	if !h[0].links[0].read.Load() || !h[1].links[0].read.Load() {
		t.Skip("this kernel refuses process_vm_readv between these processes")
	}
}

// setSplitAsked sets the split pulls' hook for the test.
func setSplitAsked(t *testing.T, f func(l *link, k int)) {
	splitAsked = f
	t.Cleanup(func() { splitAsked = nil })
}

// pingPong sends each size from rank 0 to rank 1 and back, one message
// at a time, and checks that every message arrives whole.
func pingPong(t *testing.T, e [2]*engine.Engine, sizes []int) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			for i, n := range sizes {
				got := make([]byte, n)
				if err := recvWait(e[1], got, 0); err != nil {
					return err
				}
				if want := pattern(n, i); string(got) != string(want) {
					return errors.New("rank 1 received a message that differs from the one sent")
				}
				if err := sendWait(e[1], got, 0); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	for i, n := range sizes {
		if err := sendWait(e[0], pattern(n, i), 1); err != nil {
			t.Fatalf("message %d of %d bytes: %v", i, n, err)
		}
		got := make([]byte, n)
		if err := recvWait(e[0], got, 1); err != nil {
			t.Fatalf("message %d of %d bytes back: %v", i, n, err)
		}
		require.Equal(t, pattern(n, i), got, "message %d of %d bytes back", i, n)
	}
	require.NoError(t, <-errc)
}

// sendWait and recvWait post a send or a receive of b with peer, with
// tag 7, and wait for it.
func sendWait(e *engine.Engine, b []byte, peer int) error { return opWait(e.Isend, b, peer) }
func recvWait(e *engine.Engine, b []byte, peer int) error { return opWait(e.Irecv, b, peer) }

func opWait(post func(backend.Buffer, int, int, uintptr) (backend.Request, error), b []byte, peer int) error {
	r, err := post(bytesOf(b), peer, 7, 0)
	if err != nil {
		return err
	}
	defer r.Release()
	_, err = r.Wait(10 * time.Second)
	return err
}

// TestSplitPull: a pulled message of splitFrom bytes or more is copied by
// both ranks, each direction: the sender writes chunks from one end while
// the receiver reads from the other, and every message arrives whole. The
// hook holds each receiver until its sender has taken a chunk, so that
// both do, whatever the scheduler.
func TestSplitPull(t *testing.T) {
	e, h := pairCopy(t, CopySingle)
	needSingleCopy(t, h)
	var asked, late atomic.Int32
	setSplitAsked(t, func(l *link, k int) {
		asked.Add(1)
		deadline := time.Now().Add(5 * time.Second)
		for l.claims.Back() == k {
			if time.Now().After(deadline) {
				late.Add(1)
				return
			}
			time.Sleep(20 * time.Microsecond)
		}
	})
	pingPong(t, e, splitSizes)
	split := int32(2 * (len(splitSizes) - 1))
	assert.Equal(t, split, asked.Load(), "every message from splitFrom on, each way, is split")
	assert.Zero(t, late.Load(), "a sender that never helped within 5 s")
	assert.Positive(t, h[0].links[0].helped.Load(), "rank 0 wrote chunks into rank 1's buffers")
	assert.Positive(t, h[1].links[0].helped.Load(), "rank 1 wrote chunks into rank 0's buffers")
}

// TestSplitHelperStops: a sender whose write into the receiver's memory
// fails stops, saying so; the receiver copies the chunk it had taken, and
// the message arrives whole.
func TestSplitHelperStops(t *testing.T) {
	e, h := pairCopy(t, CopySingle)
	needSingleCopy(t, h)
	var failed atomic.Int32
	writeTo = func(pid int, remote uintptr, local []byte) (int, error) {
		failed.Add(1)
		return 0, errors.New("write refused, as a test wants")
	}
	t.Cleanup(func() { writeTo = origWriteTo })
	var stopped atomic.Int32
	setSplitAsked(t, func(l *link, k int) {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Microsecond) {
			if _, s := l.claims.Helped(); s {
				stopped.Add(1)
				return
			}
		}
	})
	pingPong(t, e, []int{1 << 20, 3<<20 + 123})
	assert.Equal(t, int32(4), stopped.Load(), "each split's sender took a chunk and stopped")
	assert.Equal(t, int32(4), failed.Load(), "a sender stops at its first failed write")
	assert.Zero(t, h[0].links[0].helped.Load()+h[1].links[0].helped.Load())
}

var origWriteTo = writeTo

// TestNoSplit: with Options.NoSplit (SplitEnv=0) a receiver pulls alone.
func TestNoSplit(t *testing.T) {
	e, h := pairOpts(t, Options{Copy: CopySingle, NoSplit: true})
	needSingleCopy(t, h)
	var asked atomic.Int32
	setSplitAsked(t, func(*link, int) { asked.Add(1) })
	pingPong(t, e, splitSizes)
	assert.Zero(t, asked.Load())
	assert.Zero(t, h[0].links[0].helped.Load()+h[1].links[0].helped.Load())
	assert.False(t, h[1].links[0].choose.split)
}

// TestSplitCollectiveNot: a collective's message (a negative tag) is
// pulled by its receiver alone: there every rank copies at once already.
func TestSplitCollectiveNot(t *testing.T) {
	_, h := pairCopy(t, CopySingle)
	l := h[1].links[0]
	assert.False(t, l.canSplit(1<<20, -3))
	assert.True(t, l.canSplit(1<<20, 3))
	assert.False(t, l.canSplit(1<<20, 3), "the link's claims are taken: another pull goes alone")
	l.splitting.Store(false)
	assert.False(t, l.canSplit(splitFrom-1, 3))
}

// TestChooserSplitStart: where pulls are split, a class of sizes starts
// on the pull from splitFrom to splitStartMax and on the pipeline
// elsewhere; without the split, every class starts on the pipeline.
func TestChooserSplitStart(t *testing.T) {
	now := time.Now().UnixNano()
	c := &chooser{split: true}
	for n, want := range map[int64]bool{128 << 10: false, splitFrom: true, 256 << 10: true, 1 << 20: true, 8 << 20: true, 8<<20 + 1: false, 64 << 20: false} {
		assert.Equal(t, want, c.pull(n, now), "%d bytes", n)
	}
	c = &chooser{}
	for _, n := range []int64{128 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20} {
		assert.False(t, c.pull(n, now), "%d bytes", n)
	}
}

// TestParseSplit: the values of SplitEnv, and the error of another.
func TestParseSplit(t *testing.T) {
	for v, want := range map[string]bool{"": true, "1": true, " true ": true, "0": false, "false": false} {
		on, err := ParseSplit(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, on, v)
	}
	_, err := ParseSplit("sometimes")
	assert.ErrorIs(t, err, backend.ErrInvalid)
	assert.ErrorContains(t, err, SplitEnv)
}

// TestSplitChunk: a split copy's chunks: two halves in whole pages below
// two chunks' worth, splitChunkMin above, and larger ones where
// splitChunkMin would make more than the claims hold.
func TestSplitChunk(t *testing.T) {
	assert.Equal(t, 68<<10, splitChunk(splitFrom))
	assert.Equal(t, splitChunkMin, splitChunk(2*splitChunkMin))
	assert.Equal(t, splitChunkMin, splitChunk(1<<30))
	huge := 1 << 40
	c := splitChunk(huge)
	assert.LessOrEqual(t, (huge+c-1)/c, 1<<20-1)
}

// TestDecodeHelp: a CTSHelp's request round-trips; one of no bytes, no
// chunk size, or more chunks than the claims hold is a frame error.
func TestDecodeHelp(t *testing.T) {
	q := helpReq{dst: 0x7f0012345000, n: 3<<20 + 5, chunk: 256 << 10, gen: 77}
	var b [helpSize]byte
	q.encode(&b)
	got, err := decodeHelp(b[:])
	require.NoError(t, err)
	assert.Equal(t, q, got)
	assert.Equal(t, 13, got.chunks())
	for _, bad := range []helpReq{{n: 0, chunk: 1}, {n: 1, chunk: 0}, {n: 1 << 30, chunk: 1}, {n: -5, chunk: 8}} {
		bad.encode(&b)
		_, err := decodeHelp(b[:])
		assert.ErrorIs(t, err, engine.ErrFrame, "%+v", bad)
	}
	huge := helpReq{n: 5, chunk: 1<<63 - 1}
	huge.encode(&b)
	got, err = decodeHelp(b[:])
	require.NoError(t, err)
	assert.Equal(t, 1, got.chunks(), "a chunk size near the int64 limit: one chunk, no overflow")
	_, err = decodeHelp(b[:8])
	assert.ErrorIs(t, err, engine.ErrFrame)
}

// TestChooserLargeEpochs: an epoch of large messages is as many as make
// epochBytes (at least a sample's), so a class of 64 MiB messages that
// starts on the pipeline explores the pull after exploreMin short epochs
// (a few dozen messages, not thousands), and takes it when it is faster.
func TestChooserLargeEpochs(t *testing.T) {
	assert.Equal(t, epochLen, epochMsgs(1<<20))
	assert.Equal(t, 4, epochMsgs(4<<20))
	assert.Equal(t, sampleLen(64<<20), epochMsgs(64<<20))

	const n = 64 << 20
	k := sizeClass(n)
	c := &chooser{split: true}
	at := func(rate float64) time.Duration { return time.Duration(float64(n) / rate) }
	msgs, pulls := 0, 0
	for pulls == 0 {
		if c.pull(n, 0) {
			pulls++
			c.observe(wayPull, k, n, at(18))
		} else {
			c.observe(wayPipelined, k, n, at(10))
		}
		msgs++
		require.LessOrEqual(t, msgs, (exploreMin+2)*epochMsgs(n), "no exploration of the pull")
	}
	for range 2 * epochMsgs(n) {
		if c.pull(n, 0) {
			c.observe(wayPull, k, n, at(18))
		} else {
			c.observe(wayPipelined, k, n, at(10))
		}
	}
	assert.True(t, c.class[k].settled)
	assert.Equal(t, wayPull, c.class[k].faster, "the pull, 1.8 × faster, taken")
}
