package tcp

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
)

// loopback connects two ranks over real loopback TCP, so that waiting
// goroutines read the sockets themselves (net.Pipe has no descriptor to
// poll).
func loopback(t *testing.T) []backend.Conn { return loopbackWith(t, Options{}) }

// dialPair connects two loopback TCP sockets: the accepted side and the
// dialled one.
func dialPair(t testing.TB) (accepted, dialled net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acc <- nil
			return
		}
		acc <- c
	}()
	dialled, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	accepted = <-acc
	require.NotNil(t, accepted)
	return accepted, dialled
}

// loopbackWith is loopback with o's eager limit and socket buffers.
func loopbackWith(t testing.TB, o Options) []backend.Conn {
	t.Helper()
	c0, c1 := dialPair(t)
	var err error
	conns := [][]net.Conn{{nil, c0}, {c1, nil}}
	out := make([]backend.Conn, 2)
	for i := range out {
		oi := o
		oi.Rank, oi.Size, oi.Conns, oi.Linger = i, 2, conns[i], time.Second
		out[i], err = New(context.Background(), oi)
		require.NoError(t, err)
	}
	for i, c := range out {
		require.NotEmpty(t, c.(*engine.Engine).Transport(1-i))
	}
	closeAtCleanup(t, out)
	return out
}

// pattern fills b with bytes that name message i of sender from.
func pattern(b []byte, from, i int) {
	for k := range b {
		b[k] = byte(from*131 + i*7 + k*13)
	}
	if len(b) >= 8 {
		binary.LittleEndian.PutUint32(b, uint32(i))
		binary.LittleEndian.PutUint32(b[4:], uint32(from))
	}
}

// checkPattern reports how b differs from what pattern wrote.
func checkPattern(b []byte, from, i int) error {
	want := make([]byte, len(b))
	pattern(want, from, i)
	for k := range b {
		if b[k] != want[k] {
			return fmt.Errorf("message %d from rank %d: byte %d of %d is %#x, want %#x", i, from, k, len(b), b[k], want[k])
		}
	}
	return nil
}

// TestLoopbackWaiterAndReaderKeepOrder sends many small and large
// messages both ways at once over loopback TCP, one tag, so that each must
// arrive in the order it was sent, while the receivers take them in turns
// three ways: waiting at once (the waiting goroutine reads the socket),
// posting late (the reader goroutine has queued them as unexpected), and
// polling with Test. No frame may be lost or reordered, whoever reads it,
// including the DATA of large messages that change hands half-way.
func TestLoopbackWaiterAndReaderKeepOrder(t *testing.T) {
	cs := loopback(t)
	sizes := []int{1, 8, 100, 4 << 10, 64 << 10, 64<<10 + 1, 300 << 10, 3 << 20}
	count := 300
	if testing.Short() {
		count = 60
	}
	sizeOf := func(i int) int {
		if i%5 == 4 {
			return sizes[4+i/5%4] // every fifth is large: eager limit and over
		}
		return sizes[i%4]
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for me := range 2 {
		peer := 1 - me
		wg.Add(2)
		go func() { // sender
			defer wg.Done()
			reqs := make([]backend.Request, 0, 16)
			bufs := make([][]byte, 0, 16)
			flush := func() error {
				for k, r := range reqs {
					if _, err := r.Wait(20 * time.Second); err != nil {
						return fmt.Errorf("rank %d send: %w", me, err)
					}
					r.Release()
					bufs[k] = nil
				}
				reqs, bufs = reqs[:0], bufs[:0]
				return nil
			}
			for i := range count {
				b := make([]byte, sizeOf(i))
				pattern(b, me, i)
				r, err := cs[me].Isend(backend.Buffer{Ptr: unsafePointer(b), Count: int64(len(b)), Type: backend.Uint8}, peer, 3, 0)
				if err != nil {
					errs <- err
					return
				}
				reqs, bufs = append(reqs, r), append(bufs, b)
				if len(reqs) == cap(reqs) || i%7 == 0 {
					if err := flush(); err != nil {
						errs <- err
						return
					}
				}
			}
			if err := flush(); err != nil {
				errs <- err
			}
		}()
		go func() { // receiver
			defer wg.Done()
			for i := 0; i < count; {
				mode := i / 3 % 3
				if mode == 1 {
					time.Sleep(time.Millisecond) // let the reader goroutine take them
				}
				batch := min(3, count-i)
				reqs := make([]backend.Request, batch)
				bufs := make([][]byte, batch)
				for k := range batch {
					bufs[k] = make([]byte, sizeOf(i+k))
					r, err := cs[me].Irecv(backend.Buffer{Ptr: unsafePointer(bufs[k]), Count: int64(len(bufs[k])), Type: backend.Uint8}, peer, 3, 0)
					if err != nil {
						errs <- err
						return
					}
					reqs[k] = r
				}
				for k, r := range reqs {
					var st backend.Status
					var err error
					if mode == 2 {
						deadline := time.Now().Add(20 * time.Second)
						for {
							var done bool
							if done, st, err = r.Test(); done || time.Now().After(deadline) {
								if !done && err == nil {
									err = fmt.Errorf("Test never completed")
								}
								break
							}
						}
					} else {
						st, err = r.Wait(20 * time.Second)
					}
					r.Release()
					if err == nil && st.Count != int64(len(bufs[k])) {
						err = fmt.Errorf("count %d, want %d", st.Count, len(bufs[k]))
					}
					if err == nil {
						err = checkPattern(bufs[k], peer, i+k)
					}
					if err != nil {
						errs <- fmt.Errorf("rank %d, message %d (mode %d): %w", me, i+k, mode, err)
						return
					}
				}
				i += batch
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, c := range cs {
		l := c.(*engine.Engine).Link(1 - i).(*link)
		l.rmu.Lock()
		taken := l.rd.taken
		l.rmu.Unlock()
		t.Logf("rank %d: %d steps by the reader goroutine, %d by waiters", i, taken[0], taken[1])
		if taken[0] == 0 || taken[1] == 0 {
			t.Errorf("rank %d: the reader goroutine took %d steps and waiters %d: the test did not exercise both", i, taken[0], taken[1])
		}
	}
}

// loopbackN connects n ranks over real loopback TCP, every pair.
func loopbackN(t *testing.T, n int) []backend.Conn {
	t.Helper()
	conns := make([][]net.Conn, n)
	for i := range conns {
		conns[i] = make([]net.Conn, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			acc := make(chan net.Conn, 1)
			go func() {
				c, _ := ln.Accept()
				acc <- c
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			conns[j][i], conns[i][j] = c, <-acc
			ln.Close()
			require.NotNil(t, conns[i][j])
		}
	}
	out := make([]backend.Conn, n)
	var err error
	for i := range out {
		out[i], err = New(context.Background(), Options{Rank: i, Size: n, Conns: conns[i], Linger: time.Second})
		require.NoError(t, err)
	}
	closeAtCleanup(t, out)
	return out
}

// TestPollReadySet: with three ranks each rank's waiters find the links
// to read with one ppoll (on Linux), and messages from both peers, small
// and large, to named and wildcard receives, arrive whole and in order
// while the third rank stays silent or talks too.
func TestPollReadySet(t *testing.T) {
	conns := loopbackN(t, 3)
	if runtime.GOOS == "linux" {
		for i, c := range conns {
			l, ok := c.(*engine.Engine).Link((i + 1) % 3).(*link)
			require.True(t, ok, "rank %d", i)
			require.NotNil(t, l.poller, "rank %d polls no link", i)
			require.NotNil(t, l.poller.ready, "rank %d has no ready set", i)
			require.Len(t, l.poller.ready.fds, 2)
		}
	}
	const rounds = 100
	sizes := []int{8, 4 << 10, 300 << 10} // eager, and past the eager limit
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for from := 1; from <= 2; from++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				b := make([]byte, sizes[i%len(sizes)])
				pattern(b, from, i)
				r, err := conns[from].Isend(backend.Buffer{Ptr: unsafePointer(b), Count: int64(len(b)), Type: backend.Uint8}, 0, from, 0)
				if err == nil {
					_, err = r.Wait(20 * time.Second)
					r.Release()
				}
				if err != nil {
					errs <- fmt.Errorf("rank %d, message %d: %w", from, i, err)
					return
				}
			}
		}()
	}
	got := [3]int{}
	for k := range 2 * rounds {
		// Wildcards take whichever peer's message came first, so a named
		// receive goes to a peer with messages still to come: naming one
		// whose messages the wildcards have all taken would wait forever.
		src := 1 + k%2
		if got[src] == rounds {
			src = 3 - src
		}
		if k%3 == 0 {
			src = backend.AnySource
		}
		b := make([]byte, 300<<10)
		r, err := conns[0].Irecv(backend.Buffer{Ptr: unsafePointer(b), Count: int64(len(b)), Type: backend.Uint8}, src, backend.AnyTag, 0)
		require.NoError(t, err)
		st, err := r.Wait(20 * time.Second)
		r.Release()
		require.NoError(t, err, "receive %d", k)
		i := got[st.Source]
		require.Equal(t, int64(sizes[i%len(sizes)]), st.Count, "message %d from rank %d", i, st.Source)
		require.NoError(t, checkPattern(b[:st.Count], st.Source, i), "message %d from rank %d", i, st.Source)
		got[st.Source]++
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDrainStopsAtShortRead: a drain whose read took all the socket held
// (fewer bytes than the buffer had room for) hands over the frames it
// brought and ends there, without a second read that could only say
// EAGAIN; frames that arrive after it are taken by the next drain, whole
// and in order.
func TestDrainStopsAtShortRead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts the reads of a socket descriptor, which the reader has on Linux")
	}
	conns := loopback(t)
	l, ok := conns[0].(*engine.Engine).Link(1).(*link)
	require.True(t, ok)
	require.NotNil(t, l.rd.rc, "the link has no descriptor to read")

	const size = 16
	sendAll := func(first, n int) {
		for i := first; i < first+n; i++ {
			b := make([]byte, size)
			pattern(b, 1, i)
			r, err := conns[1].Isend(backend.Buffer{Ptr: unsafePointer(b), Count: size, Type: backend.Uint8}, 0, 7, 0)
			require.NoError(t, err)
			_, err = r.Wait(5 * time.Second)
			r.Release()
			require.NoError(t, err)
		}
	}
	frame := int64(engine.HeaderSize + size)
	// drainAfter takes rmu (so that neither the reader goroutine nor a
	// waiter reads the socket meanwhile), sends messages first to first+n-1,
	// waits until the socket holds them, drains it once and returns the
	// reads that made.
	drainAfter := func(first, n int) (reads int, did bool) {
		l.rmu.Lock()
		defer l.rmu.Unlock()
		sendAll(first, n)
		want := int64(n) * frame
		deadline := time.Now().Add(5 * time.Second)
		for int64(l.rd.held()) < want {
			require.True(t, time.Now().Before(deadline), "the socket holds %d bytes, want %d", l.rd.held(), want)
			time.Sleep(time.Millisecond)
		}
		orig := l.rd.io.readFn
		l.rd.io.readFn = func(fd uintptr) { reads++; orig(fd) }
		defer func() { l.rd.io.readFn = orig }()
		var err error
		did, err = l.rd.drain(l.p, true)
		require.NoError(t, err)
		return reads, did
	}

	reads, did := drainAfter(0, 1)
	require.True(t, did)
	require.Equal(t, 1, reads, "reads to take one frame")

	reads, did = drainAfter(1, 5)
	require.True(t, did)
	require.Equal(t, 1, reads, "reads to take five frames that came together")

	reads, did = drainAfter(6, 0)
	require.False(t, did)
	require.Equal(t, 1, reads, "reads of an empty socket")

	// Every message is delivered, in order, to receives posted now.
	for i := range 6 {
		b := make([]byte, size)
		r, err := conns[0].Irecv(backend.Buffer{Ptr: unsafePointer(b), Count: size, Type: backend.Uint8}, 1, 7, 0)
		require.NoError(t, err)
		st, err := r.Wait(5 * time.Second)
		r.Release()
		require.NoError(t, err)
		require.Equal(t, int64(size), st.Count)
		require.NoError(t, checkPattern(b, 1, i))
	}
}
