package tcp

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/auth"
)

// hub is an in-process all-gather for Open: every rank's blob, then a
// hook that sees them all before any rank gets them back, then each rank
// released (rank r after delay[r]).
type hub struct {
	mu      sync.Mutex
	blobs   [][]byte
	arrived int
	done    chan struct{}
	hook    func(blobs [][]byte)
	delay   []time.Duration
}

func newHub(n int, hook func([][]byte)) *hub {
	return &hub{blobs: make([][]byte, n), done: make(chan struct{}), hook: hook, delay: make([]time.Duration, n)}
}

// exchange is rank r's Exchanger.
func (h *hub) exchange(r int) backend.Exchanger { return hubRank{h, r} }

type hubRank struct {
	h *hub
	r int
}

func (x hubRank) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	h := x.h
	h.mu.Lock()
	h.blobs[x.r] = append([]byte(nil), data...)
	h.arrived++
	if h.arrived == len(h.blobs) {
		if h.hook != nil {
			h.hook(h.blobs)
		}
		close(h.done)
	}
	h.mu.Unlock()
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if d := h.delay[x.r]; d > 0 {
		time.Sleep(d)
	}
	return h.blobs, nil
}

func (hubRank) Close() error { return nil }

// openAll runs Open for n ranks of the tcp driver over h, at once.
func openAll(ctx context.Context, n int, key string, h *hub) ([]backend.Conn, []error) {
	return openAllEnv(ctx, n, key, h, nil)
}

// openAllEnv is openAll with rank r's environment env(r) (nil: empty).
func openAllEnv(ctx context.Context, n int, key string, h *hub, env func(r int) func(string) string) ([]backend.Conn, []error) {
	conns := make([]backend.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			getenv := func(string) string { return "" }
			if env != nil {
				getenv = env(r)
			}
			conns[r], errs[r] = Driver{}.Open(ctx, backend.Config{
				Job:      backend.Job{Rank: r, Size: n, Key: key, Addr: "127.0.0.1:1"},
				Exchange: h.exchange(r),
				Env:      getenv,
			})
		})
	}
	wg.Wait()
	return conns, errs
}

// ringWorks sends one message around the ring of conns.
func ringWorks(t *testing.T, conns []backend.Conn) {
	t.Helper()
	n := len(conns)
	var wg sync.WaitGroup
	for r, c := range conns {
		wg.Go(func() {
			out, in := []int64{int64(r)}, []int64{-1}
			rq, err := c.Irecv(bufOf(in, backend.Int64), (r+n-1)%n, 3, 0)
			require.NoError(t, err)
			sq, err := c.Isend(bufOf(out, backend.Int64), (r+1)%n, 3, 0)
			require.NoError(t, err)
			_, err = sq.Wait(10 * time.Second)
			assert.NoError(t, err)
			_, err = rq.Wait(10 * time.Second)
			assert.NoError(t, err)
			assert.Equal(t, int64((r+n-1)%n), in[0])
		})
	}
	wg.Wait()
}

func closeConns(conns []backend.Conn) {
	var wg sync.WaitGroup
	for _, c := range conns {
		if c != nil {
			wg.Go(func() { c.Close() })
		}
	}
	wg.Wait()
}

// claimFor is the dialer's claim of rank of size, with key, answering
// the challenge nonce.
func claimFor(key string, rank, size int, nonce [auth.NonceSize]byte) []byte {
	b := append([]byte(hsMagic), 0, 0)
	binary.LittleEndian.PutUint16(b[4:], hsVersion)
	b = append(b, ranksBytes(rank, size)...)
	mine := auth.Nonce()
	b = append(b, mine[:]...)
	p := auth.Prove(key, hsContext, nonce, ranksBytes(rank, size))
	return append(b, p[:]...)
}

// TestStrangersAtDataPort connects strangers to rank 0's data port while
// the job connects: silent ones, garbage, a port scan's connect and
// close, a process with another key, and a replayed claim of rank 1 (one
// that answered another handshake's nonce). None of them fails the job
// or makes it wait for the handshake deadline.
func TestStrangersAtDataPort(t *testing.T) {
	const n, key = 3, "s3cret"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var strangers []net.Conn
	var knocks sync.WaitGroup
	defer func() {
		for _, c := range strangers {
			c.Close()
		}
		knocks.Wait()
	}()
	h := newHub(n, func(blobs [][]byte) {
		cd, err := parseCard(blobs[0])
		assert.NoError(t, err)
		dial := func() net.Conn {
			c, err := net.Dial("tcp", cd.tcp)
			if !assert.NoError(t, err) {
				c, _ = net.Pipe()
			}
			strangers = append(strangers, c)
			return c
		}
		for range 3 {
			dial() // silent
		}
		dial().Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		dial().Write(make([]byte, claimSize+100))
		dial().Close() // a port scan
		strangers = strangers[:len(strangers)-1]
		wrong := dial()
		knocks.Go(func() { // rank 0 says hello once Open accepts
			var hello [helloSize]byte
			wrong.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(wrong, hello[:]); err == nil {
				nonce, _ := parseHello(hello[:])
				wrong.Write(claimFor("another key", 1, n, nonce))
			}
		})
		dial().Write(claimFor(key, 1, n, auth.Nonce())) // replayed: another nonce
	})
	start := time.Now()
	conns, errs := openAll(ctx, n, key, h)
	defer closeConns(conns)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Open took %v with strangers at the port", d)
	}
	ringWorks(t, conns)
}

// TestSecondClaimRefused has a process with the key claim rank 1 at rank
// 0's data port after the real rank 1 connected: it is refused, the first
// connection stays, and the job works.
func TestSecondClaimRefused(t *testing.T) {
	t.Parallel() // waits more than it computes
	const n, key = 3, "s3cret"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var addr string
	h := newHub(n, func(blobs [][]byte) {
		cd, err := parseCard(blobs[0])
		assert.NoError(t, err)
		addr = cd.tcp
	})
	h.delay[2] = 500 * time.Millisecond // rank 0 still waits for rank 2
	refusal := make(chan error, 1)
	go func() {
		<-h.done
		time.Sleep(200 * time.Millisecond) // rank 1 is connected by now
		hs := handshake{key: key, rank: 1, size: n}
		nc, err := dialPeer(ctx, "tcp", addr, hs, 0)
		if err == nil {
			nc.Close()
		}
		refusal <- err
	}()
	conns, errs := openAll(ctx, n, key, h)
	defer closeConns(conns)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	err := <-refusal
	require.Error(t, err, "a second rank 1 was admitted")
	assert.True(t, strings.Contains(err.Error(), "rank 1 is already connected"), "%v", err)
	ringWorks(t, conns)
}

// TestMissingRankNamed gives Open a deadline that rank 2 never meets:
// rank 0's error names it, and the strangers it dropped.
func TestMissingRankNamed(t *testing.T) {
	t.Parallel() // waits more than it computes
	const n, key = 3, "s3cret"
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var stranger net.Conn
	h := newHub(n, func(blobs [][]byte) {
		cd, _ := parseCard(blobs[0])
		var err error
		if stranger, err = net.Dial("tcp", cd.tcp); assert.NoError(t, err) {
			stranger.Write(make([]byte, claimSize))
		}
	})
	defer func() {
		if stranger != nil {
			stranger.Close()
		}
	}()
	h.delay[2] = 1500 * time.Millisecond
	conns, errs := openAll(ctx, n, key, h)
	defer closeConns(conns)
	require.Error(t, errs[0])
	assert.Contains(t, errs[0].Error(), "rank 2")
	assert.Contains(t, errs[0].Error(), fmt.Sprintf("dropped %d connection", 1))
}

// TestStrangerFlood fills rank 0's handshakes with more silent strangers
// than it runs at once: the extra ones are closed, the ranks' dials that
// meet a full acceptor are tried again, and Open completes once the
// strangers' handshakes time out.
func TestStrangerFlood(t *testing.T) {
	old := hsTimeout
	hsTimeout = 300 * time.Millisecond
	defer func() { hsTimeout = old }()
	const n, key = 3, "s3cret"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var strangers []net.Conn
	defer func() {
		for _, c := range strangers {
			c.Close()
		}
	}()
	h := newHub(n, func(blobs [][]byte) {
		cd, err := parseCard(blobs[0])
		assert.NoError(t, err)
		for range maxUnauthenticated + 10 {
			c, err := net.Dial("tcp", cd.tcp)
			if !assert.NoError(t, err) {
				return
			}
			strangers = append(strangers, c)
		}
	})
	start := time.Now()
	conns, errs := openAll(ctx, n, key, h)
	defer closeConns(conns)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open took %v behind %d silent strangers, handshake deadline %v", d, len(strangers), hsTimeout)
	}
	ringWorks(t, conns)
}
