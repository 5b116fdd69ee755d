//go:build linux

package shm

import (
	"bytes"
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// socketPair returns the two ends of a unix stream socket pair.
func socketPair(t testing.TB) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		require.NoError(t, err)
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// pair joins two engines (ranks 0 and 1 of one job, in this process)
// through shared memory.
func pair(t testing.TB) (e [2]*engine.Engine, h [2]*Hub) {
	return pairCopy(t, CopyPipelined)
}

// pairCopy is pair with the copy of large messages c.
func pairCopy(t testing.TB, c Copy) (e [2]*engine.Engine, h [2]*Hub) {
	t.Helper()
	return pairOpts(t, Options{Copy: c})
}

// pairOpts is pair with Join's options o.
func pairOpts(t testing.TB, o Options) (e [2]*engine.Engine, h [2]*Hub) {
	t.Helper()
	a, b := socketPair(t)
	conns := [2]*net.UnixConn{a, b}
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		var err error
		e[i], err = engine.New(engine.Options{Rank: i, Size: 2, Linger: time.Second, LocalRanks: 2})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			h[i], errs[i] = Join(ctx, e[i], []Local{{Rank: 1 - i, Conn: conns[i]}}, o)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	h[0].Start()
	h[1].Start()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, x := range e {
			wg.Add(1)
			go func() { defer wg.Done(); x.Close() }()
		}
		wg.Wait()
	})
	return e, h
}

func bytesOf(b []byte) backend.Buffer {
	if len(b) == 0 {
		return backend.Buffer{Type: backend.Uint8}
	}
	return backend.Buffer{Ptr: unsafe.Pointer(unsafe.SliceData(b)), Count: int64(len(b)), Type: backend.Uint8}
}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + seed)
	}
	return b
}

// exchange sends msgs from rank 0 to rank 1, all posted before any
// receive, and checks that each arrives whole and in order.
func exchange(t *testing.T, e [2]*engine.Engine, sizes []int) {
	t.Helper()
	var sends []backend.Request
	for i, n := range sizes {
		r, err := e[0].Isend(bytesOf(pattern(n, i)), 1, 3, 0)
		require.NoError(t, err, "send %d of %d bytes", i, n)
		sends = append(sends, r)
	}
	for i, n := range sizes {
		got := make([]byte, n)
		r, err := e[1].Irecv(bytesOf(got), 0, 3, 0)
		require.NoError(t, err)
		st, err := r.Wait(10 * time.Second)
		require.NoError(t, err, "receive %d of %d bytes", i, n)
		r.Release()
		require.Equal(t, int64(n), st.Count)
		require.Equal(t, pattern(n, i), got, "message %d of %d bytes", i, n)
	}
	for i, r := range sends {
		_, err := r.Wait(10 * time.Second)
		require.NoError(t, err, "send %d", i)
		r.Release()
	}
}

var sizes = []int{0, 1, 1000, maxEagerPull, maxEagerPull + 1, maxEager, maxEager + 1, 3 << 20}

// TestSizes: eager messages through the ring, large ones through it in
// chunks.
func TestSizes(t *testing.T) {
	e, _ := pair(t)
	assert.Equal(t, "shm", e[0].Transport(1))
	exchange(t, e, sizes)
}

// TestTwoCopies: with CopyPipelined a large message goes through the ring
// in DATA chunks, the sender's writer waiting for room.
func TestTwoCopies(t *testing.T) {
	e, h := pairCopy(t, CopyPipelined)
	require.False(t, h[0].links[0].pull)
	require.False(t, h[1].links[0].pull)
	// Nobody pulls, so messages up to maxEager go whole through the ring.
	assert.Equal(t, int64(maxEager), h[0].links[0].EagerLimit())
	assert.Equal(t, int64(maxEager), h[1].links[0].EagerLimit())
	exchange(t, e, []int{maxEagerPull + 1, maxEager, maxEager + 1, 3 << 20, streamFrom - 1, streamFrom, streamFrom + 4093, 20 << 20})
}

// TestCopyIn: payloads on both sides of streamInFrom, up to the eager
// limit, and pipelined chunks, arrive whole and in order whichever way
// the sender copies them into the ring.
func TestCopyIn(t *testing.T) {
	for _, in := range []CopyIn{CopyInStream, CopyInCache} {
		t.Run(in.String(), func(t *testing.T) {
			e, h := pairOpts(t, Options{Copy: CopyPipelined, CopyIn: in})
			require.Equal(t, in, h[0].copyIn)
			exchange(t, e, []int{1, streamInFrom - 1, streamInFrom, streamInFrom + 1, 8191, 32<<10 + 7, maxEager - 1, maxEager, maxEager + 129, 1 << 20})
		})
	}
}

// TestStreamUnaligned: a message large enough to be copied out with
// non-temporal stores, sent from and received into buffers at odd
// addresses, arrives whole, and the bytes around the receive buffer stay
// as they were.
func TestStreamUnaligned(t *testing.T) {
	e, _ := pairCopy(t, CopyPipelined)
	const n = streamFrom + 3*streamChunk + 5
	src := pattern(n+1, 9)[1:]
	dst := make([]byte, n+14)
	for i := range dst {
		dst[i] = 0x5a
	}
	s, err := e[0].Isend(bytesOf(src), 1, 4, 0)
	require.NoError(t, err)
	r, err := e[1].Irecv(bytesOf(dst[7:7+n]), 0, 4, 0)
	require.NoError(t, err)
	_, err = r.Wait(10 * time.Second)
	require.NoError(t, err)
	r.Release()
	_, err = s.Wait(10 * time.Second)
	require.NoError(t, err)
	s.Release()
	require.Equal(t, src, dst[7:7+n])
	assert.Equal(t, bytes.Repeat([]byte{0x5a}, 7), dst[:7])
	assert.Equal(t, bytes.Repeat([]byte{0x5a}, 7), dst[7+n:])
}

// TestSingleCopy: with CopySingle, a rank that may read its peer's memory
// is offered the address of large sends, and the messages arrive whole.
func TestSingleCopy(t *testing.T) {
	e, h := pairCopy(t, CopySingle)
	if !h[1].links[0].read.Load() {
		t.Skip("this kernel refuses process_vm_readv between these processes")
	}
	require.True(t, h[0].links[0].pull)
	// Both can read each other: from maxEagerPull on, messages are
	// announced and pulled.
	assert.Equal(t, int64(maxEagerPull), h[0].links[0].EagerLimit())
	assert.Equal(t, int64(maxEagerPull), h[1].links[0].EagerLimit())
	exchange(t, e, []int{maxEagerPull, maxEagerPull + 1, maxEager, maxEager + 1, 3 << 20, 20 << 20})
}

// TestParseCopy: the values of CopyEnv and CopyInEnv, and the errors of
// others.
func TestParseCopy(t *testing.T) {
	for v, want := range map[string]Copy{"": CopyAuto, "auto": CopyAuto, "pipelined": CopyPipelined, " single ": CopySingle} {
		c, err := ParseCopy(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, c, v)
	}
	_, err := ParseCopy("zero")
	require.ErrorIs(t, err, backend.ErrInvalid)
	assert.Contains(t, err.Error(), CopyEnv)
	assert.Equal(t, "copy(9)", Copy(9).String())

	for v, want := range map[string]CopyIn{"": DefaultCopyIn(), "stream": CopyInStream, " cache ": CopyInCache} {
		c, err := ParseCopyIn(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, c, v)
	}
	_, err = ParseCopyIn("nt")
	require.ErrorIs(t, err, backend.ErrInvalid)
	assert.Contains(t, err.Error(), CopyInEnv)
	assert.Equal(t, "copyin(9)", CopyIn(9).String())
}

func TestParseFill(t *testing.T) {
	for v, want := range map[string]shmem.Fill{"": shmem.FillAhead, "1": shmem.FillAhead, " true ": shmem.FillAhead, "0": shmem.FillOnTouch, "false": shmem.FillOnTouch} {
		f, err := ParseFill(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, f, v)
	}
	_, err := ParseFill("lazy")
	require.ErrorIs(t, err, backend.ErrInvalid)
	assert.Contains(t, err.Error(), PrefaultEnv)
}

// TestRingFull: more eager messages than the ring holds, all sent before
// any is received, wait in the sender's outbox and arrive in order.
func TestRingFull(t *testing.T) {
	e, _ := pair(t)
	n := 4 * ringCap(1) / maxEager
	many := make([]int, n)
	for i := range many {
		many[i] = maxEager - i%7
	}
	exchange(t, e, many)
}

// TestCorruptRecord: a record that is not a frame ends the link: the
// receiver's pending receive fails with ErrPeerLost, and the ring is not
// read again.
func TestCorruptRecord(t *testing.T) {
	e, h := pair(t)
	got := make([]byte, 8)
	r, err := e[1].Irecv(bytesOf(got), 0, 3, 0)
	require.NoError(t, err)
	l := h[0].links[0]
	l.wmu.Lock()
	b := l.out.Reserve(engine.HeaderSize)
	copy(b, []byte{99, 1, 2, 3}) // kind 99
	l.out.Commit()
	l.wmu.Unlock()
	l.peerBell.Ring()
	_, err = r.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.ErrorContains(t, err, "malformed frame")
	r.Release()
}

// TestPeerGone: when the peer's socket ends without a goodbye (its
// process died: the kernel closes its sockets), pending operations with it
// end with ErrPeerLost at once.
func TestPeerGone(t *testing.T) {
	e, h := pair(t)
	got := make([]byte, 8)
	r, err := e[1].Irecv(bytesOf(got), 0, 3, 0)
	require.NoError(t, err)
	big := pattern(1<<20, 1)
	s, err := e[1].Isend(bytesOf(big), 0, 4, 0) // waits for a receive that never comes
	require.NoError(t, err)
	start := time.Now()
	h[0].links[0].uc.Close() // rank 0 "dies"
	_, err = r.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.ErrorContains(t, err, "without a goodbye")
	_, err = s.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.Less(t, time.Since(start), 2*time.Second)
	r.Release()
	s.Release()
}

// TestCloseTellsPeer: Close sends BYE; the peer's pending receive ends
// with ErrPeerLost that says the rank closed in order.
func TestCloseTellsPeer(t *testing.T) {
	e, _ := pair(t)
	got := make([]byte, 8)
	r, err := e[1].Irecv(bytesOf(got), 0, 3, 0)
	require.NoError(t, err)
	go e[0].Close()
	_, err = r.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.ErrorIs(t, err, backend.ErrPeerClosed)
	r.Release()
}

// round is one blocking round trip with peer: a send then a receive
// (first), or a receive then a send.
func round(c *engine.Engine, buf []byte, peer int, first bool) error {
	for k := range 2 {
		var r backend.Request
		var err error
		if (k == 0) == first {
			r, err = c.Isend(bytesOf(buf), peer, 0, 0)
		} else {
			r, err = c.Irecv(bytesOf(buf), peer, 0, 0)
		}
		if err == nil {
			_, err = r.Wait(10 * time.Second)
			r.Release()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkPingPong is a blocking round trip between two in-process ranks
// over shared memory; ns/op is one round trip.
func BenchmarkPingPong(b *testing.B) {
	for _, n := range []int{1, 4 << 10, 64 << 10, 1 << 20} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			e, _ := pair(b)
			buf0, buf1 := make([]byte, n), make([]byte, n)
			b.SetBytes(int64(2 * n))
			b.ReportAllocs()
			done := make(chan error, 1)
			b.ResetTimer()
			go func() {
				for range b.N {
					if err := round(e[1], buf1, 0, false); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for range b.N {
				if err := round(e[0], buf0, 1, true); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkPath is one message's whole software path on both sides, in
// one goroutine: a receive posted on rank 1, a send from rank 0, rank 1's
// wait taking the record from the ring. No other core is involved, so
// its time is the instructions and the same-core cache traffic of the
// path, not the cross-core transfers a ping-pong adds.
func BenchmarkPath(b *testing.B) {
	e, h := pair(b)
	buf0, buf1 := make([]byte, 1), make([]byte, 1)
	// As in a ping-pong's steady state, a waiter is always polling: the
	// progress goroutines keep away and no bell is armed.
	for _, x := range h {
		x.SpinStart()
		defer x.SpinEnd(false)
	}
	b.ReportAllocs()
	for b.Loop() {
		rr, err := e[1].Irecv(bytesOf(buf1), 0, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		sr, err := e[0].Isend(bytesOf(buf0), 1, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sr.Wait(time.Second); err != nil {
			b.Fatal(err)
		}
		sr.Release()
		if _, err := rr.Wait(time.Second); err != nil {
			b.Fatal(err)
		}
		rr.Release()
	}
}

// TestWaitsLeaveBellDisarmed: a rank that polls in one wait after
// another is not woken through its bell by a message that lands between
// two waits: the bell stays disarmed while the rank keeps polling (a ring
// is a system call on the sender and a thread woken on the receiver).
// Before, the first wait to find the bell armed (the progress goroutine
// asleep on it) left it armed again at its end, and so did every wait
// after it: each message that came between two waits rang it, which
// across processes was thousands of system calls a second.
func TestWaitsLeaveBellDisarmed(t *testing.T) {
	e, h := pair(t)
	for start := time.Now(); !h[1].bell.Armed(); time.Sleep(time.Millisecond) {
		require.Less(t, time.Since(start), 5*time.Second, "rank 1's progress goroutine never slept on its bell")
	}
	const n = 100
	buf := make([]byte, 8)
	work := func(d time.Duration) {
		for start := time.Now(); time.Since(start) < d; {
		}
	}
	before := h[1].bell.Rings()
	for range n {
		// A wait of rank 1 that found its result, as a ping-pong's do…
		require.True(t, h[1].SpinStart())
		h[1].Spin()
		h[1].SpinEnd(false)
		// …then a message that lands before its next wait, with time
		// for the progress goroutine to run in between (not a sleep,
		// which here lasts a millisecond or more).
		work(50 * time.Microsecond)
		r, err := e[0].Isend(bytesOf(buf), 1, 1, 0)
		require.NoError(t, err)
		_, err = r.Wait(time.Second)
		require.NoError(t, err)
		r.Release()
		work(50 * time.Microsecond)
	}
	// The first wait rings once, to wake the progress goroutine from its
	// bell; a pause of the test of a whole progressTick lets it arm the
	// bell again (a ring or two each).
	assert.LessOrEqual(t, h[1].bell.Rings()-before, uint32(n/5), "rank 1's bell was rung for the messages between its waits")
	for range n {
		r, err := e[1].Irecv(bytesOf(buf), 0, 1, 0)
		require.NoError(t, err)
		_, err = r.Wait(time.Second)
		require.NoError(t, err)
		r.Release()
	}
}

// TestParkedWaiterArmsBell: a waiter that parks while another polls is
// covered by that one's polls; when that one stops without parking, the
// bell is armed at once for the parked waiter, not at the progress
// goroutine's next look (here an hour away). Before, its arrival waited
// for that look: one to two milliseconds per message when goroutines
// waited for the transport side by side (the nccl backend's IPC path).
func TestParkedWaiterArmsBell(t *testing.T) {
	_, h := pair(t)
	x := h[1]
	x.tick.Store(int64(time.Hour))
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for start := time.Now(); !ok(); time.Sleep(100 * time.Microsecond) {
			require.Less(t, time.Since(start), 5*time.Second, what)
		}
	}
	waitFor("the progress goroutine never slept on its bell", x.bell.Armed)
	require.True(t, x.SpinStart()) // a waiter that polls: the bell is rung, the progress goroutine ticks
	polling := true
	defer func() {
		if polling {
			x.SpinEnd(false) // so that the pair can close
		}
	}()
	waitFor("the first waiter's ring did not disarm the bell", func() bool { return !x.bell.Armed() })
	require.True(t, x.SpinStart()) // another, which parks
	x.SpinEnd(true)
	time.Sleep(10 * time.Millisecond)
	assert.False(t, x.bell.Armed(), "armed while a waiter polls")
	polling = false
	x.SpinEnd(false) // the poller stops, its request done
	waitFor("the bell was not armed for the parked waiter", x.bell.Armed)
}

// TestCollAfterEveryPeerGone: a collective started once every peer's
// link has ended fails with ErrPeerLost naming the lost rank, as one
// under way does, not with ErrClosed: the survivor of a job whose other
// ranks died or left must learn why. The transport itself stays until
// this rank closes (the peers' parts written before they left are still
// read: TestSharedBcastAfterRootLeft in package mp).
func TestCollAfterEveryPeerGone(t *testing.T) {
	_, h := pair(t)
	c := h[1].Coll()
	require.NotNil(t, c)
	h[0].links[0].uc.Close() // rank 0 "dies"
	for start := time.Now(); h[1].live.Load() != 0; time.Sleep(time.Millisecond) {
		require.Less(t, time.Since(start), 5*time.Second, "rank 1's link did not end")
	}
	assert.False(t, h[1].closed.Load(), "rank 1's transport ended before rank 1 closed")
	r, err := c.Collective(backend.Coll{Kind: backend.Barrier})
	if err == nil {
		_, err = r.Wait(5 * time.Second)
		r.Release()
	}
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.ErrorContains(t, err, "rank 0")
}

// TestFailedPullLosesPeer: a pulled rendezvous whose copy out of the
// sender's memory fails because the sender's process is gone (here: a pid
// that is no process's) ends the receive with ErrPeerLost and marks the
// peer lost, so the rest of what waits on it ends too and this rank's
// goodbye to the others names the lost rank. Before, only the receive
// ended: the rank's later BYE named no one, and its peers blamed it for
// the loss (the kill campaign found it on shared memory).
func TestFailedPullLosesPeer(t *testing.T) {
	e, h := pairCopy(t, CopySingle)
	if !h[1].links[0].read.Load() {
		t.Skip("this kernel refuses process_vm_readv between these processes")
	}
	h[1].links[0].pid = 1 << 30 // past any pid_max: process_vm_readv says ESRCH
	big := pattern(maxEager+1, 1)
	s, err := e[0].Isend(bytesOf(big), 1, 3, 0)
	require.NoError(t, err)
	defer s.Release()
	got := make([]byte, len(big))
	r, err := e[1].Irecv(bytesOf(got), 0, 3, 0)
	require.NoError(t, err)
	_, err = r.Wait(5 * time.Second)
	r.Release()
	require.ErrorIs(t, err, backend.ErrPeerLost)
	later, err := e[1].Irecv(bytesOf(make([]byte, 8)), 0, 4, 0)
	if err == nil {
		_, err = later.Wait(time.Second)
		later.Release()
	}
	require.ErrorIs(t, err, backend.ErrPeerLost, "rank 0 is not marked lost")
}

// TestCollDoneThenNext: a request's Done starts a goroutine that looks at
// the request under the mutex; the next collective, started once the
// request is waited for and released, must not rewrite the request under
// that goroutine (go test -race found it, with Done asked right before
// Wait, when the goroutine got the mutex only after Wait had finished).
func TestCollDoneThenNext(t *testing.T) {
	_, h := pair(t)
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := h[rank].Coll()
			for i := range 200 {
				r, err := c.Collective(backend.Coll{Kind: backend.Barrier})
				if err != nil {
					t.Errorf("rank %d, call %d: %v", rank, i, err)
					return
				}
				done := r.Done()
				if _, err := r.Wait(10 * time.Second); err != nil {
					t.Errorf("rank %d, call %d: %v", rank, i, err)
					return
				}
				<-done
				r.Release()
			}
		}()
	}
	wg.Wait()
}
