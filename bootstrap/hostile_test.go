package bootstrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/errs"
)

// TestStrangersPinNoMemory has hundreds of connections without the key
// each announce a blob of 1 MiB during the rendezvous: rank 0 allocates
// nothing for them, and the job completes.
func TestStrangersPinNoMemory(t *testing.T) {
	const strangers = 300
	jobs := newJobs(t, 3, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var rank0 Exchanger
	var err0 error
	var wg sync.WaitGroup
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	wg.Go(func() { rank0, err0 = Connect(ctx, jobs[0]) })

	conns := make([]net.Conn, 0, strangers)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range strangers {
		c, err := net.Dial("tcp", jobs[1].Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		// A blob header announcing 1 MiB, then a little of it.
		c.Write(append(header(frameBlob, MaxBlob), make([]byte, 1000)...))
	}
	time.Sleep(200 * time.Millisecond) // let rank 0 read what they sent
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)

	ex := make([]Exchanger, 3)
	errs := make([]error, 3)
	for r := 1; r < 3; r++ {
		wg.Go(func() { ex[r], errs[r] = Connect(ctx, jobs[r]) })
	}
	wg.Wait()
	ex[0], errs[0] = rank0, err0
	defer closeAll(ex)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if grew := int64(during.HeapInuse) - int64(before.HeapInuse); grew > 32<<20 {
		t.Errorf("%d strangers announcing 1 MiB each grew rank 0's heap by %d MiB", strangers, grew>>20)
	} else {
		t.Logf("%d strangers announcing 1 MiB each: heap grew by %d KiB", strangers, grew>>10)
	}
	if _, errs := gatherAll(ctx, ex, func(r int) []byte { return []byte{byte(r)} }); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
}

// TestSilentStrangersBounded opens more silent connections than rank 0
// handshakes at once: the extra ones are closed at once, the others after
// the handshake deadline, and the ranks still join.
func TestSilentStrangersBounded(t *testing.T) {
	defer setHandshakeTimeout(300 * time.Millisecond)()
	jobs := newJobs(t, 2, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rank0 Exchanger
	var err0 error
	var wg sync.WaitGroup
	wg.Go(func() { rank0, err0 = Connect(ctx, jobs[0]) })

	n := maxUnauthenticated + 20
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", jobs[1].Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	// Every one of them ends: each is read to its end, within the
	// handshake deadline and some slack.
	start := time.Now()
	var closed sync.WaitGroup
	for _, c := range conns {
		closed.Go(func() {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			io.Copy(io.Discard, c)
		})
	}
	closed.Wait()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("silent strangers were dropped after %v, handshake deadline 300ms", d)
	}

	ex, err := Connect(ctx, jobs[1])
	wg.Wait()
	if err0 != nil || err != nil {
		t.Fatalf("rank 0: %v; rank 1: %v", err0, err)
	}
	rank0.Close()
	ex.Close()
}

// TestBusyRendezvousRetried fills rank 0's handshakes with silent
// strangers while a rank joins: its connection is dropped, and it tries
// again until it is admitted.
func TestBusyRendezvousRetried(t *testing.T) {
	defer setHandshakeTimeout(500 * time.Millisecond)()
	jobs := newJobs(t, 2, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rank0 Exchanger
	var err0 error
	var wg sync.WaitGroup
	wg.Go(func() { rank0, err0 = Connect(ctx, jobs[0]) })
	for range maxUnauthenticated {
		c, err := net.Dial("tcp", jobs[1].Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	ex, err := Connect(ctx, jobs[1])
	wg.Wait()
	if err0 != nil || err != nil {
		t.Fatalf("rank 0: %v; rank 1: %v", err0, err)
	}
	rank0.Close()
	ex.Close()
}

// relay forwards bytes between a rank and rank 0, and lets the test
// rewrite the frames rank 0 sends.
type relay struct {
	ln     net.Listener
	target string
	// down rewrites a blob frame's payload on its way to the rank.
	down func(p []byte)
	wg   sync.WaitGroup
}

func newRelay(t *testing.T, target string, down func(p []byte)) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, down: down}
	r.wg.Go(r.serve)
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.wg.Go(func() { io.Copy(up, c); up.Close(); c.Close() })
		r.wg.Go(func() {
			defer c.Close()
			defer up.Close()
			for {
				var h [headerLen]byte
				if _, err := io.ReadFull(up, h[:]); err != nil {
					return
				}
				p := make([]byte, binary.BigEndian.Uint32(h[1:]))
				if _, err := io.ReadFull(up, p); err != nil {
					return
				}
				if h[0] == frameBlob {
					r.down(p)
				}
				if _, err := c.Write(append(h[:], p...)); err != nil {
					return
				}
			}
		})
	}
}

// TestTamperedBlob puts a relay between rank 1 and rank 0 that rewrites
// rank 0's address in the all-gather: rank 1 detects it and says so.
func TestTamperedBlob(t *testing.T) {
	jobs := newJobs(t, 2, "s3cret")
	rl := newRelay(t, jobs[0].Addr, func(p []byte) {
		if len(p) > 0 && p[len(p)-1] == '0' {
			p[len(p)-1] = '9' // "10.0.0.1:4000" becomes "...:4009"
		}
	})
	jobs[1].Addr = rl.ln.Addr().String()
	ex := mustConnect(t, jobs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, errs := gatherAll(ctx, ex, func(r int) []byte { return fmt.Appendf(nil, "10.0.0.%d:4000", r+1) })
	if errs[1] == nil {
		t.Fatalf("rank 1 took rewritten addresses: %q", out[1])
	}
	wantErr(t, "rank 1", errs[1], []error{ErrTampered, errs0PeerLost}, "rank 0")
}

var errs0PeerLost = errs.ErrPeerLost

// TestSentinels checks that the bootstrap's errors match courier's
// sentinels, as mp's callers test them.
func TestSentinels(t *testing.T) {
	for _, c := range []struct {
		err, want error
	}{
		{ErrBadEnv, errs.ErrInvalid},
		{ErrRefused, errs.ErrInvalid},
		{ErrNoRendezvous, errs.ErrInvalid},
		{ErrTooLarge, errs.ErrInvalid},
		{ErrPeerLost, errs.ErrPeerLost},
		{ErrTampered, errs.ErrPeerLost},
		{ErrClosed, errs.ErrClosed},
	} {
		if !errors.Is(fmt.Errorf("wrapped: %w", c.err), c.want) {
			t.Errorf("%q does not match %q", c.err, c.want)
		}
	}
	_, err := Connect(context.Background(), Job{Rank: 3, Size: 2})
	wantErr(t, "invalid job", err, []error{errs.ErrInvalid}, "rank 3 of size 2")
	_, err = FromEnv(func(k string) string {
		return map[string]string{"COURIER_RANK": "x", "COURIER_SIZE": "2"}[k]
	})
	wantErr(t, "bad environment", err, []error{ErrBadEnv, errs.ErrInvalid})
	jobs := newJobs(t, 3, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var err0 error
	wg.Go(func() { _, err0 = Connect(ctx, jobs[0]) })
	wrong := jobs[1]
	wrong.Size = 2
	_, err = Connect(ctx, wrong)
	cancel() // no rank left to come: rank 0 stops waiting for late ones (TestSizeMismatch)
	wg.Wait()
	wantErr(t, "size mismatch", err, []error{ErrRefused, errs.ErrInvalid}, "size mismatch")
	wantErr(t, "rank 0", err0, []error{ErrRefused, errs.ErrInvalid}, "size mismatch")
}

// TestUnresolvableHostFailsFast gives COURIER_ADDR a host no resolver
// knows: the rank fails at once instead of retrying until its deadline.
func TestUnresolvableHostFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	_, lerr := net.DefaultResolver.LookupHost(lctx, "no-such-host.invalid")
	lcancel()
	if dns, ok := errors.AsType[*net.DNSError](lerr); !ok || !dns.IsNotFound {
		t.Skipf("this host's resolver does not say a name is unknown (%v): nothing to test", lerr)
	}
	start := time.Now()
	_, err := Connect(ctx, Job{Rank: 1, Size: 2, Key: "k", Addr: "no-such-host.invalid:4000"})
	wantErr(t, "rank 1", err, []error{errs.ErrInvalid}, "no-such-host.invalid", "COURIER_ADDR")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("an unresolvable host took %v to fail", d)
	}
}

// TestGiveUpNamesWrongKey has a rank with another key knock while rank 1
// never comes: rank 0's error says it refused a connection with a wrong
// key, which is what went wrong.
func TestGiveUpNamesWrongKey(t *testing.T) {
	t.Parallel() // waits more than it computes
	jobs := newJobs(t, 2, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var err0 error
	var wg sync.WaitGroup
	wg.Go(func() { _, err0 = Connect(ctx, jobs[0]) })
	stranger := jobs[1]
	stranger.Key = "another"
	sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := join(sctx, stranger, stranger.Key)
	scancel()
	wantErr(t, "stranger", err, []error{ErrRefused}, "job key mismatch")
	wg.Wait()
	wantErr(t, "rank 0", err0, []error{ErrPeerLost}, "refused 1 connection", "job key")
}

// TestLateRankLearnsFailure fails the rendezvous (a rank with the wrong
// size) before rank 2 comes: rank 2 learns why at once, instead of
// waiting out its deadline.
func TestLateRankLearnsFailure(t *testing.T) {
	jobs := newJobs(t, 3, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx0, cancel0 := context.WithCancel(ctx)
	defer cancel0()
	var err0 error
	var wg sync.WaitGroup
	wg.Go(func() { _, err0 = Connect(ctx0, jobs[0]) })
	wrong := jobs[1]
	wrong.Size = 4
	_, err := join(ctx, wrong, wrong.Key)
	wantErr(t, "rank 1", err, []error{ErrRefused}, "size mismatch")
	start := time.Now()
	_, err = join(ctx, jobs[2], jobs[2].Key)
	wantErr(t, "rank 2", err, []error{ErrRefused}, "size mismatch")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("rank 2 learnt after %v", d)
	}
	cancel0() // every rank has come: rank 0 need not wait for more (failLinger)
	wg.Wait()
	wantErr(t, "rank 0", err0, []error{ErrRefused}, "size mismatch")
}

// setHandshakeTimeout shortens the deadline of rank 0's handshakes for a
// test, and returns what restores it.
func setHandshakeTimeout(d time.Duration) func() {
	old := handshakeTimeout
	handshakeTimeout = d
	return func() { handshakeTimeout = old }
}
