package conformance

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// messageCases are about single messages: empty ones, statuses, receive
// buffers of the wrong size or type, sizes around protocol thresholds, and
// when a send buffer may be reused.
func messageCases() []Case {
	return []Case{
		{Name: "Empty/NilAndEmpty", MinRanks: 2, Run: emptyNilAndEmpty},
		{Name: "Empty/IntoLargerBuffer", MinRanks: 2, Run: emptyIntoLargerBuffer},
		{Name: "Status/LargerBuffer", MinRanks: 2, Run: statusLargerBuffer},
		{Name: "Status/Send", MinRanks: 2, Run: statusSend},
		{Name: "Truncate/Eager", MinRanks: 2, Run: func(t T, c *mp.Comm) { truncate(t, c, 100) }},
		{Name: "Truncate/Rendezvous", MinRanks: 2, Run: func(t T, c *mp.Comm) { truncate(t, c, 1<<17) }},
		{Name: "Mismatch/Eager", MinRanks: 2, Run: func(t T, c *mp.Comm) { mismatch(t, c, 64) }},
		{Name: "Mismatch/Rendezvous", MinRanks: 2, Run: func(t T, c *mp.Comm) { mismatch(t, c, 256<<10) }},
		{Name: "Sizes/Boundaries", MinRanks: 2, Run: sizesBoundaries},
		{Name: "Buffers/SubSlice", MinRanks: 2, Run: buffersSubSlice},
		{Name: "Completion/SendBufferReuse", MinRanks: 2, Run: sendBufferReuse},
	}
}

// emptyNilAndEmpty: nil and empty slices are valid zero-element buffers,
// blocking and non-blocking.
func emptyNilAndEmpty(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	if c.Rank() == 0 {
		require.NoError(t, mp.Send(c, []float64(nil), peer, 1), "send nil")
		require.NoError(t, mp.Send(c, []float64{}, peer, 2), "send empty")
		q := mp.Isend(c, []int8(nil), peer, 3)
		st, err := q.Wait()
		require.NoError(t, err, "Isend nil")
		assert.Equal(t, mp.Status{Source: c.Rank(), Tag: 3, Count: 0}, st, "Isend status")
		require.NoError(t, mp.Send(c, make([]mp.BFloat16, 0, 8), peer, 4), "send empty with capacity")
		return
	}
	st, err := mp.Recv(c, []float64(nil), peer, 1)
	require.NoError(t, err, "receive into nil")
	assert.Equal(t, mp.Status{Source: peer, Tag: 1, Count: 0}, st)
	st, err = mp.Recv(c, []float64{}, peer, 2)
	require.NoError(t, err, "receive into empty")
	assert.Equal(t, mp.Status{Source: peer, Tag: 2, Count: 0}, st)
	st, err = mp.Irecv(c, []int8(nil), peer, 3).Wait()
	require.NoError(t, err, "Irecv into nil")
	assert.Equal(t, mp.Status{Source: peer, Tag: 3, Count: 0}, st)
	st, err = mp.Recv(c, make([]mp.BFloat16, 0, 8), peer, 4)
	require.NoError(t, err, "receive into empty with capacity")
	assert.Equal(t, mp.Status{Source: peer, Tag: 4, Count: 0}, st)
}

// emptyIntoLargerBuffer: a zero-element message received into a buffer of
// 5 leaves the buffer alone and says Count 0 (with checks on, counts must
// agree: ErrMismatch).
func emptyIntoLargerBuffer(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	if c.Rank() == 0 {
		require.NoError(t, mp.Send(c, []complex128(nil), peer, 4))
		require.NoError(t, mp.Send(c, []complex128{7i}, peer, 5), "the next message")
		return
	}
	buf := []complex128{1, 2, 3, 4, 5}
	st, err := mp.Recv(c, buf, peer, 4)
	if c.Checked() {
		isErr(t, err, mp.ErrMismatch, "checked: an empty message into a buffer of 5")
	} else {
		require.NoError(t, err)
		assert.Equal(t, mp.Status{Source: peer, Tag: 4, Count: 0}, st)
	}
	assert.Equal(t, []complex128{1, 2, 3, 4, 5}, buf, "buffer must be untouched")
	one := []complex128{0}
	_, err = mp.Recv(c, one, peer, 5)
	require.NoError(t, err, "the next message")
	assert.Equal(t, []complex128{7i}, one)
}

// statusLargerBuffer: a message smaller than the receive buffer fills its
// front; Count says how much; the rest is untouched. Small and large.
func statusLargerBuffer(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for i, n := range []int{10, 100 << 10 / 8} { // 80 B, 100 KiB
		tag := 5 + i
		if c.Rank() == 0 {
			err := mp.Send(c, words(n, uint64(n)), peer, tag)
			if c.Checked() && err != nil {
				isErr(t, err, mp.ErrMismatch, "checked: the sender of %d words into a buffer of %d", n, 10*n+3)
				continue
			}
			require.NoError(t, err)
			continue
		}
		buf := make([]uint64, 10*n+3)
		for j := range buf {
			buf[j] = 0xdeadbeef
		}
		st, err := mp.Recv(c, buf, peer, tag)
		if c.Checked() {
			isErr(t, err, mp.ErrMismatch, "checked: %d words into a buffer of %d", n, len(buf))
			continue
		}
		require.NoError(t, err, "%d words into a buffer of %d", n, len(buf))
		assert.Equal(t, mp.Status{Source: peer, Tag: tag, Count: int64(n)}, st)
		checkWords(t, "message", buf[:n], uint64(n))
		for j := n; j < len(buf); j++ {
			if buf[j] != 0xdeadbeef {
				t.Errorf("%d words into a buffer of %d: element %d beyond the message was written (%#x)", n, len(buf), j, buf[j])
				break
			}
		}
	}
	// The communicator still matches exactly afterwards.
	if c.Rank() == 0 {
		require.NoError(t, mp.Send(c, []int16{-3}, peer, 9))
	} else {
		got := []int16{0}
		_, err := mp.Recv(c, got, peer, 9)
		require.NoError(t, err)
		assert.Equal(t, []int16{-3}, got)
	}
}

// statusSend: a completed send's status is its own rank, its tag and the
// count sent.
func statusSend(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	sizes := []int{0, 3, 1 << 20}
	if c.Rank() == 0 {
		for i, n := range sizes {
			st, err := mp.Isend(c, make([]float32, n), peer, 20+i).Wait()
			require.NoError(t, err, "Isend of %d", n)
			assert.Equal(t, mp.Status{Source: c.Rank(), Tag: 20 + i, Count: int64(n)}, st, "Isend of %d", n)
		}
		return
	}
	for i, n := range sizes {
		st, err := mp.Recv(c, make([]float32, n), peer, 20+i)
		require.NoError(t, err, "receive of %d", n)
		assert.Equal(t, mp.Status{Source: peer, Tag: 20 + i, Count: int64(n)}, st, "receive of %d", n)
	}
}

// truncate: a message of n words into a buffer of n/2 fails with
// ErrTruncate, writes nothing past the buffer, and the next message on the
// same tag arrives whole. The sender may or may not learn of it (TCP
// reports it to the sender of a large message only); if it does, it is
// ErrTruncate.
func truncate(t T, c *mp.Comm, n int) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const tag = 3
	if c.Rank() == 0 {
		if err := mp.Send(c, words(n, 1), peer, tag); err != nil {
			isErr(t, err, mp.ErrTruncate, "the sender of a truncated message")
		}
		require.NoError(t, mp.Send(c, words(n, 2), peer, tag), "the next message")
		return
	}
	buf := make([]uint64, n)
	for i := range buf {
		buf[i] = 0xdeadbeef
	}
	_, err := mp.Recv(c, buf[:n/2], peer, tag)
	isErr(t, err, mp.ErrTruncate, "%d words into a buffer of %d", n, n/2)
	for i := n / 2; i < n; i++ {
		if buf[i] != 0xdeadbeef {
			t.Errorf("the truncated receive wrote element %d, past its buffer of %d", i, n/2)
			break
		}
	}
	st, err := mp.Recv(c, buf, peer, tag)
	require.NoError(t, err, "the message after a truncated one")
	assert.Equal(t, mp.Status{Source: peer, Tag: tag, Count: int64(n)}, st)
	checkWords(t, "the message after a truncated one", buf, 2)
}

// mismatch: for pairs of element types of one size, a message of one
// received as the other fails with ErrMismatch, and the communicator goes
// on. bytes is the size of each message.
func mismatch(t T, c *mp.Comm, bytes int) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	pairs := []func(t T, c *mp.Comm, peer, bytes, tag int){
		mismatchPair[[]float32, []int32],
		mismatchPair[[]int32, []uint32],
		mismatchPair[[]float64, []int64],
		mismatchPair[[]int8, []uint8],
		mismatchPair[[]uint16, []mp.Float16],
		mismatchPair[[]mp.Float16, []mp.BFloat16],
		mismatchPair[[]complex64, []float64],
		mismatchPair[[]complex128, []complex64],
	}
	for i, f := range pairs {
		f(t, c, peer, bytes, 30+i)
	}
}

func mismatchPair[S, R mp.Buffer](t T, c *mp.Comm, peer, bytes, tag int) {
	t.Helper()
	what := fmt.Sprintf("%v sent, %v received", reflectName[S](), reflectName[R]())
	if c.Rank() == 0 {
		s := pattern[S](bytes/elemSize[S](), 1)
		if err := mp.Send(c, s, peer, tag); err != nil {
			isErr(t, err, mp.ErrMismatch, "%s: the sender", what)
		}
		require.NoError(t, mp.Send(c, s, peer, tag), "%s: the next message", what)
		return
	}
	_, err := mp.Recv(c, alloc[R](bytes/elemSize[R]()), peer, tag)
	if isErr(t, err, mp.ErrMismatch, "%s (%d bytes)", what, bytes) {
		// "the error names both ranks" (mp.ErrMismatch).
		var oe *mp.OpError
		if errors.As(err, &oe) {
			msg := oe.Err.Error()
			for _, r := range []int{0, 1} {
				assert.True(t, strings.Contains(msg, fmt.Sprintf("rank %d", r)),
					"%s: the mismatch error %q does not name rank %d", what, msg, r)
			}
		}
	}
	want := pattern[S](bytes/elemSize[S](), 1)
	got := alloc[S](bytes / elemSize[S]())
	_, err = mp.Recv(c, got, peer, tag)
	require.NoError(t, err, "%s: the next message", what)
	sameBits(t, what+": the next message", got, want)
}

// sizesBoundaries: messages of sizes around the TCP backend's eager limit
// and DATA chunk, odd sizes included, arrive whole.
func sizesBoundaries(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	sizes := []int{0, 1, 7, eagerBytes - 1, eagerBytes, eagerBytes + 1,
		chunkBytes - 1, chunkBytes, chunkBytes + 1, 2*chunkBytes + 5}
	for i, n := range sizes {
		if c.Rank() == 0 {
			require.NoError(t, mp.Send(c, octets(n, uint64(n)), peer, i), "send %d bytes", n)
			continue
		}
		got := make([]byte, n)
		st, err := mp.Recv(c, got, peer, i)
		require.NoError(t, err, "receive %d bytes", n)
		assert.Equal(t, mp.Status{Source: peer, Tag: i, Count: int64(n)}, st)
		sameBits(t, fmt.Sprintf("%d bytes", n), got, octets(n, uint64(n)))
	}
}

// sendBufferReuse: once Send (or Wait of an Isend) returns, overwriting the
// buffer does not change what the receiver gets, even when the receive is
// posted later.
func sendBufferReuse(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	sizes := []int{100, 1 << 17} // 800 B, 1 MiB
	if c.Rank() == 0 {
		for i, n := range sizes {
			buf := words(n, uint64(i))
			require.NoError(t, mp.Send(c, buf, peer, i))
			clear(buf)
			buf = words(n, uint64(i+10))
			q := mp.Isend(c, buf, peer, 10+i)
			_, err := q.Wait()
			require.NoError(t, err)
			clear(buf)
		}
		return
	}
	time.Sleep(50 * time.Millisecond) // the small messages arrive unexpected
	for i, n := range sizes {
		got := make([]uint64, n)
		_, err := mp.Recv(c, got, peer, i)
		require.NoError(t, err)
		checkWords(t, fmt.Sprintf("Send of %d words", n), got, uint64(i))
		_, err = mp.Recv(c, got, peer, 10+i)
		require.NoError(t, err)
		checkWords(t, fmt.Sprintf("Isend of %d words", n), got, uint64(i+10))
	}
}

func reflectName[S mp.Buffer]() string { return fmt.Sprintf("%T", *new(S)) }

func elemSize[S mp.Buffer]() int { return int(reflect.TypeFor[S]().Elem().Size()) }

// buffersSubSlice: a buffer that is part of a larger array sends and
// receives exactly its own elements: the memory before and after it is
// neither sent nor written.
func buffersSubSlice(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for i, n := range []int{5, 1 << 17} {
		const off = 3
		if c.Rank() == 0 {
			whole := words(n+2*off, 7)
			require.NoError(t, mp.Send(c, whole[off:off+n], peer, i))
			continue
		}
		whole := make([]uint64, n+4*off)
		for j := range whole {
			whole[j] = 0xdeadbeef
		}
		part := whole[2*off : 2*off+n : 2*off+n+1]
		st, err := mp.Recv(c, part, peer, i)
		require.NoError(t, err)
		assert.Equal(t, mp.Status{Source: peer, Tag: i, Count: int64(n)}, st)
		want := words(n+2*off, 7)[off : off+n]
		if !assert.Equal(t, len(want), len(part)) {
			continue
		}
		for j := range part {
			if part[j] != want[j] {
				t.Errorf("%d words into a sub-slice: element %d is %#x, want %#x", n, j, part[j], want[j])
				break
			}
		}
		for j, v := range whole {
			if (j < 2*off || j >= 2*off+n) && v != 0xdeadbeef {
				t.Errorf("%d words into a sub-slice at %d: element %d of the array outside it was written", n, 2*off, j)
				break
			}
		}
	}
}
