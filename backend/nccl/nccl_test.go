package nccl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/backend/tcp"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/leakcheck"
	"github.com/courier-mp/courier/internal/testscope"
)

// The tests in this file run everywhere: the loader's error path, the
// element types, the wire formats, and the communicator's logic on the
// fake engine (fake_test.go) with real host connections over net.Pipe.
// The tests that need GPUs are in gpu_test.go.

func TestLoaderMissingLibrary(t *testing.T) {
	path := "/nonexistent/courier-test/libnccl.so.2"
	_, err := loadLibrary(path)
	if !errors.Is(err, backend.ErrNotSupported) {
		t.Fatalf("loading %s: got %v, want an error matching ErrNotSupported", path, err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("the error %q does not name the path %s", err, path)
	}
	// Cached: the same answer again.
	if _, err2 := loadLibrary(path); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second load: %v, want %v", err2, err)
	}

	t.Setenv(LibraryEnv, path)
	if err := (Driver{}).Available(); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("Available with %s=%s: %v, want ErrNotSupported", LibraryEnv, path, err)
	}
	// Open reports the loader's reason too (before it meets anyone: a
	// one-rank job).
	cfg := backend.Config{
		Job:      backend.Job{Rank: 0, Size: 1, LocalRank: 0},
		Exchange: localExchange{},
		Env:      func(k string) string { return map[string]string{LibraryEnv: path}[k] },
	}
	_, err = Driver{}.Open(context.Background(), cfg)
	if !errors.Is(err, backend.ErrNotSupported) || !strings.Contains(err.Error(), path) {
		t.Errorf("Open with a missing library: %v, want ErrNotSupported naming %s", err, path)
	}
}

// TestSwitchEnv: each 0/1 variable of the backend reads as 1, 0 or its
// default, and anything else is ErrInvalid naming it; Open says so before
// loading anything.
func TestSwitchEnv(t *testing.T) {
	for _, sw := range []struct {
		name string
		read func(func(string) string) (bool, error)
		def  bool
	}{
		{BlockingEnv, blockingMode, true},
		{EventsEnv, eventsMode, false},
		{SharedStreamEnv, sharedStreamMode, true},
	} {
		for v, want := range map[string]bool{"": sw.def, "1": true, " 1 ": true, "0": false} {
			got, err := sw.read(func(string) string { return v })
			if err != nil || got != want {
				t.Errorf("%s=%q: %v, %v; want %v", sw.name, v, got, err, want)
			}
		}
		for _, v := range []string{"yes", "2", "true", "on"} {
			if _, err := sw.read(func(string) string { return v }); !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), sw.name) {
				t.Errorf("%s=%q: %v, want ErrInvalid naming the variable", sw.name, v, err)
			}
		}
	}
	// Open says so before loading anything.
	cfg := backend.Config{
		Job:      backend.Job{Rank: 0, Size: 1, LocalRank: 0},
		Exchange: localExchange{},
		Env:      func(k string) string { return map[string]string{BlockingEnv: "yes"}[k] },
	}
	if _, err := (Driver{}).Open(context.Background(), cfg); !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), BlockingEnv) {
		t.Errorf("Open with %s=yes: %v, want ErrInvalid naming the variable", BlockingEnv, err)
	}
}

// localExchange is the exchange of a one-rank job.
type localExchange struct{}

func (localExchange) AllGather(_ context.Context, data []byte) ([][]byte, error) {
	return [][]byte{data}, nil
}
func (localExchange) Close() error { return nil }

func TestRegistered(t *testing.T) {
	d, ok := backend.Lookup("nccl")
	if !ok {
		t.Fatal(`"nccl" is not registered`)
	}
	if _, ok := d.(backend.Availability); !ok {
		t.Error("the nccl driver does not implement backend.Availability")
	}
}

func TestWireTypes(t *testing.T) {
	for _, c := range []struct {
		dt    backend.DType
		typ   ncclType
		count uint64 // for 10 elements
	}{
		{backend.Int8, ncclInt8, 10},
		{backend.Uint8, ncclUint8, 10},
		{backend.Int16, ncclUint8, 20},
		{backend.Uint16, ncclUint8, 20},
		{backend.Int32, ncclInt32, 10},
		{backend.Uint32, ncclUint32, 10},
		{backend.Int64, ncclInt64, 10},
		{backend.Uint64, ncclUint64, 10},
		{backend.Float16, ncclFloat16, 10},
		{backend.BFloat16, ncclBfloat16, 10},
		{backend.Float32, ncclFloat32, 10},
		{backend.Float64, ncclFloat64, 10},
		{backend.Complex64, ncclUint8, 80},
		{backend.Complex128, ncclUint8, 160},
	} {
		typ, count, err := wireType(c.dt, 10)
		if err != nil || typ != c.typ || count != c.count {
			t.Errorf("wireType(%v, 10) = %d, %d, %v; want %d, %d", c.dt, typ, count, err, c.typ, c.count)
		}
	}
	for _, dt := range []backend.DType{backend.Invalid, backend.DType(200)} {
		if _, _, err := wireType(dt, 1); !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("wireType(%v): %v, want ErrInvalid", dt, err)
		}
	}
	if _, _, err := wireType(backend.Complex128, 1<<60); !errors.Is(err, backend.ErrInvalid) {
		t.Errorf("wireType of 2^60 complex128: %v, want ErrInvalid", err)
	}
	// Every valid type has a mapping.
	for dt := backend.DType(1); dt.Valid(); dt++ {
		if _, _, err := wireType(dt, 1); err != nil {
			t.Errorf("wireType(%v): %v", dt, err)
		}
	}
}

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{22803: "2.28.3", 21400: "2.14.0", 2708: "2.7.8", 30001: "3.0.1"} {
		if got := versionString(v); got != want {
			t.Errorf("versionString(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	var b [envSize]byte
	in := envelope{seq: 1<<40 + 3, count: 1<<33 + 5, tag: backend.MaxTag, typ: backend.BFloat16}
	in.encode(&b)
	out, err := decodeEnvelope(&b)
	if err != nil || out != in {
		t.Fatalf("round trip: %+v, %v; want %+v", out, err, in)
	}
	in.tag = -2
	in.encode(&b)
	if out, _ := decodeEnvelope(&b); out.tag != -2 {
		t.Errorf("negative tag: %d", out.tag)
	}
	b[20] = 0
	if _, err := decodeEnvelope(&b); err == nil {
		t.Error("an envelope of element type 0 was accepted")
	}
}

func TestHelloRoundTrip(t *testing.T) {
	lo := &local{host: "h", bus: "0000:19:00.0", ipc: true, world: true}
	h, err := decodeHello(0, encodeHello(lo, nil))
	if err != nil || h.host != "h" || h.bus != lo.bus || !h.ipc || !h.world {
		t.Fatalf("round trip: %+v, %v", h, err)
	}
	if h, err := decodeHello(0, encodeHello(&local{host: "h"}, nil)); err != nil || h.ipc || h.world {
		t.Fatalf("round trip without flags: %+v, %v", h, err)
	}
	if _, err := decodeHello(0, append(encodeHello(lo, nil), 0)); !errors.Is(err, backend.ErrCorrupt) {
		t.Errorf("a hello with a byte after its flags: %v", err)
	}
	nsErr := fmt.Errorf("%w: no GPU", backend.ErrNotSupported)
	_, err = decodeHello(1, encodeHello(nil, nsErr))
	if !errors.Is(err, backend.ErrNotSupported) || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "no GPU") {
		t.Errorf("a rank that cannot join: %v", err)
	}
	_, err = decodeHello(2, encodeHello(nil, errors.New("boom")))
	if err == nil || errors.Is(err, backend.ErrNotSupported) || !strings.Contains(err.Error(), "boom") {
		t.Errorf("a rank that failed: %v", err)
	}
	for _, b := range [][]byte{nil, {9}, {0, 5}} {
		if _, err := decodeHello(0, b); err == nil {
			t.Errorf("hello %v was accepted", b)
		}
	}
}

func TestIDsRoundTrip(t *testing.T) {
	ids := make([][idBytes]byte, 3)
	ids[1][0], ids[2][127] = 7, 9
	got, err := decodeIDs(0, 3, encodeIDs(ids, nil))
	if err != nil || len(got) != 3 || got[1] != ids[1] || got[2] != ids[2] {
		t.Fatalf("round trip: %v, %v", got, err)
	}
	if _, err := decodeIDs(0, 2, encodeIDs(ids, nil)); !errors.Is(err, backend.ErrCorrupt) {
		t.Errorf("3 IDs in a job of 2: %v", err)
	}
	if _, err := decodeIDs(1, 3, encodeIDs(nil, errors.New("no NCCL"))); err == nil || !strings.Contains(err.Error(), "rank 1 cannot join: no NCCL") {
		t.Errorf("a rank that could not make its IDs: %v", err)
	}
}

// TestIDsOnlyForNCCL: IDs are made only for the communicators that will
// be made (ncclGetUniqueId leaves a listening socket and a thread until
// the communicator's ranks meet): none for a rank that shares the GPU,
// the world's only at rank 0 and only when asked for.
func TestIDsOnlyForNCCL(t *testing.T) {
	gpu := func(bus string) hello { return hello{host: "h", bus: bus, ipc: true} }
	hellos := []hello{gpu("0000:19:00.0"), gpu("0000:19:00.0"), gpu("0000:2a:00.0")}
	for _, tc := range []struct {
		rank  int
		world bool
		want  []bool // by rank: an ID is made
	}{
		{0, false, []bool{false, false, true}},
		{0, true, []bool{true, false, true}},
		{1, true, []bool{false, false, true}},
		{2, true, []bool{true, true, false}},
	} {
		got := idPlaces(tc.rank, hellos, tc.world)
		if !slices.Equal(got, tc.want) {
			t.Errorf("rank %d, world %v: IDs at %v, want %v", tc.rank, tc.world, got, tc.want)
		}
	}
	if ncclPairs(hellos[:2]) || !ncclPairs(hellos) {
		t.Errorf("ncclPairs: two ranks on one GPU %v, three on two GPUs %v", ncclPairs(hellos[:2]), ncclPairs(hellos))
	}
}

func TestPickDevice(t *testing.T) {
	cfg := func(rank, local int, dev string) backend.Config {
		return backend.Config{
			Job: backend.Job{Rank: rank, LocalRank: local},
			Env: func(k string) string {
				if k == DeviceEnv {
					return dev
				}
				return ""
			},
		}
	}
	for _, c := range []struct {
		cfg  backend.Config
		want int
		ok   bool
	}{
		{cfg(0, 0, ""), 0, true},
		{cfg(5, 1, ""), 1, true},
		{cfg(1, -1, ""), 1, true}, // no local rank: the rank
		{cfg(0, 2, ""), 0, true},  // more ranks than GPUs: in turn
		{cfg(3, 3, ""), 1, true},
		{cfg(3, -1, ""), 1, true},
		{cfg(0, 0, "1"), 1, true},
		{cfg(0, 0, "2"), 0, false},
		{cfg(0, 0, "x"), 0, false},
		{cfg(0, 0, "-1"), 0, false},
	} {
		d, err := pickDevice(c.cfg, 2)
		if c.ok && (err != nil || int(d) != c.want) || !c.ok && !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("pickDevice(rank %d, local %d, %s=%q) = %v, %v", c.cfg.Job.Rank, c.cfg.Job.LocalRank,
				DeviceEnv, c.cfg.Getenv(DeviceEnv), d, err)
		}
	}
}

// --- The communicator on the fake engine ---

// fakeJobs numbers the jobs fakeJob makes, for their fabrics' keys.
var fakeJobs atomic.Int64

// fakeJob makes the communicators of an n-rank job in this process: fake
// engines on one fabric, and tcp host connections over net.Pipe.
func fakeJob(t testing.TB, n int, check bool) ([]*conn, *fabric) {
	t.Helper()
	key := fmt.Sprintf("%s/%d", t.Name(), fakeJobs.Add(1))
	f := fabricFor(key)
	derive := func(ctx context.Context, s splitSpec) (*conn, error) {
		return openFake(ctx, fmt.Sprintf("%s/%d", key, s.id), s.rank, s.size, check, false, s.ctl, s.fam)
	}
	pipes := make([][]net.Conn, n)
	for i := range pipes {
		pipes[i] = make([]net.Conn, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			pipes[i][j], pipes[j][i] = net.Pipe()
		}
	}
	cs := make([]*conn, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range n {
		var ctl *control
		if n > 1 {
			tc, err := tcp.New(ctx, tcp.Options{Rank: r, Size: n, Conns: pipes[r], Linger: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctl = newControl(tc)
		}
		cs[r] = newConn(connOptions{rank: r, size: n, check: check, eng: f.engine(r), ctl: ctl, derive: derive})
		wg.Go(func() {
			warm := make([]byte, 2*n)
			err := cs[r].connectAll(ctx, func(p int) (send, recv op) {
				send = op{peer: p, typ: backend.Uint8, count: 1, buf: hostBuf(warm[:1])}
				recv = op{peer: p, recv: true, typ: backend.Uint8, count: 1, buf: hostBuf(warm[1+p : 2+p])}
				return send, recv
			})
			if err != nil {
				t.Errorf("rank %d: connecting: %v", r, err)
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Go(func() { c.Close() })
		}
		wg.Wait()
	})
	return cs, f
}

// bufOf describes a slice of any fixed-size element type.
func bufOf[T any](s []T, dt backend.DType) backend.Buffer {
	var p unsafe.Pointer
	if len(s) > 0 {
		p = unsafe.Pointer(&s[0])
	}
	return backend.Buffer{Ptr: p, Count: int64(len(s)), Type: dt, Mem: backend.Host}
}

func i32s(s []int32) backend.Buffer { return bufOf(s, backend.Int32) }

// isend and irecv start an operation, failing t if it cannot start.
func isend(t *testing.T, c *conn, b backend.Buffer, peer, tag int) backend.Request {
	t.Helper()
	r, err := c.Isend(b, peer, tag, 0)
	if err != nil {
		t.Fatalf("rank %d: Isend to rank %d, tag %d: %v", c.rank, peer, tag, err)
	}
	return r
}

func irecv(t *testing.T, c *conn, b backend.Buffer, peer, tag int) backend.Request {
	t.Helper()
	r, err := c.Irecv(b, peer, tag, 0)
	if err != nil {
		t.Fatalf("rank %d: Irecv from rank %d, tag %d: %v", c.rank, peer, tag, err)
	}
	return r
}

const testWait = 5 * time.Second

// ranks runs f on every rank at once and waits.
func ranks(cs []*conn, f func(r int, c *conn)) {
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { f(r, c) })
	}
	wg.Wait()
}

func waitAll(t *testing.T, reqs ...backend.Request) {
	t.Helper()
	for i, q := range reqs {
		if _, err := q.Wait(testWait); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
		q.Release()
	}
}

func TestFakeGrouping(t *testing.T) {
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprint("check=", check), func(t *testing.T) {
			cs, _ := fakeJob(t, 2, check)
			// Rank 0 posts a send and a receive and waits for both; rank 1
			// receives, then sends: NCCL hangs on this as first traffic
			// over one communicator; over channels it must work, every time.
			for i := range 20 {
				ranks(cs, func(r int, c *conn) {
					got := []int32{0, 0}
					if r == 0 {
						s := isend(t, c, i32s([]int32{int32(i), 1}), 1, 3)
						q := irecv(t, c, i32s(got), 1, 3)
						waitAll(t, s, q)
						if got[0] != int32(i) || got[1] != 2 {
							t.Errorf("round %d: rank 0 got %v", i, got)
						}
						return
					}
					q := irecv(t, c, i32s(got), 0, 3)
					waitAll(t, q)
					waitAll(t, isend(t, c, i32s([]int32{got[0], 2}), 0, 3))
				})
			}
		})
	}
}

// TestFakeReceiveThenSend is the pattern a single NCCL communicator cannot
// run: rank 1 posts a receive and tests it (which issues it), then sends
// to rank 0, which sends the awaited message only after that.
func TestFakeReceiveThenSend(t *testing.T) {
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprint("check=", check), func(t *testing.T) {
			cs, _ := fakeJob(t, 2, check)
			ranks(cs, func(r int, c *conn) {
				if r == 0 {
					gate := []int32{0}
					waitAll(t, irecv(t, c, i32s(gate), 1, 1))
					waitAll(t, isend(t, c, i32s([]int32{42}), 1, 2))
					return
				}
				got := []int32{0}
				q := irecv(t, c, i32s(got), 0, 2)
				if done, _, err := q.Test(); done || err != nil {
					t.Errorf("Test before the message was sent: %v, %v", done, err)
				}
				waitAll(t, isend(t, c, i32s([]int32{1}), 0, 1))
				waitAll(t, q)
				if got[0] != 42 {
					t.Errorf("got %v", got)
				}
			})
		})
	}
}

// TestFakeInProgress makes every launch answer ncclInProgress.
func TestFakeInProgress(t *testing.T) {
	cs, f := fakeJob(t, 2, false)
	f.mu.Lock()
	f.inProgressEvery = 1
	f.mu.Unlock()
	ranks(cs, func(r int, c *conn) {
		peer := 1 - r
		var reqs []backend.Request
		bufs := make([][]int32, 50)
		for i := range bufs {
			bufs[i] = []int32{-1}
			reqs = append(reqs, irecv(t, c, i32s(bufs[i]), peer, 0))
			reqs = append(reqs, isend(t, c, i32s([]int32{int32(100*r + i)}), peer, 0))
			if i%7 == 0 {
				reqs[len(reqs)-1].Test()
			}
		}
		waitAll(t, reqs...)
		for i, b := range bufs {
			if b[0] != int32(100*peer+i) {
				t.Errorf("rank %d, message %d: %v", r, i, b)
				return
			}
		}
	})
}

// TestFakeShortSend: a send smaller than its receive never completes the
// receive (as NCCL behaves); Wait times out, and Abort ends the request.
func TestFakeShortSend(t *testing.T) {
	cs, _ := fakeJob(t, 2, false)
	ranks(cs, func(r int, c *conn) {
		if r == 0 {
			waitAll(t, isend(t, c, i32s([]int32{1}), 1, 0))
			return
		}
		q := irecv(t, c, i32s(make([]int32, 2)), 0, 0)
		if _, err := q.Wait(200 * time.Millisecond); !errors.Is(err, backend.ErrTimeout) {
			t.Errorf("Wait: %v, want ErrTimeout", err)
		}
		if n := len(c.Pending()); n != 1 {
			t.Errorf("Pending lists %d operations, want 1", n)
		}
		stop := errors.New("stop")
		c.Abort(fmt.Errorf("%w: %w", backend.ErrAborted, stop))
		if _, err := q.Wait(testWait); !errors.Is(err, stop) || !errors.Is(err, backend.ErrAborted) {
			t.Errorf("after Abort: %v", err)
		}
		q.Release()
		if _, err := c.Isend(i32s([]int32{1}), 0, 0, 0); !errors.Is(err, stop) {
			t.Errorf("Isend after Abort: %v", err)
		}
	})
}

func TestFakeChecked(t *testing.T) {
	cs, _ := fakeJob(t, 2, true)
	big := make([]byte, 1<<20)
	sent := []struct {
		b   backend.Buffer
		tag int
	}{
		{i32s([]int32{1, 2, 3}), 7},                  // into 2: truncated
		{bufOf([]float32{1, 2}, backend.Float32), 7}, // as int32: mismatch
		{i32s([]int32{4}), 7},                        // into 2: count mismatch
		{i32s([]int32{5, 6}), 7},                     // fine
		{bufOf(big, backend.Uint8), 9},               // large; received after the next one
		{i32s([]int32{7, 8}), 8},                     // received first
	}
	ranks(cs, func(r int, c *conn) {
		if r == 0 {
			var reqs []backend.Request
			for _, m := range sent {
				reqs = append(reqs, isend(t, c, m.b, 1, m.tag))
			}
			waitAll(t, reqs...)
			return
		}
		buf := []int32{-1, -1}
		for i, want := range []error{backend.ErrTruncate, backend.ErrMismatch, backend.ErrMismatch} {
			q := irecv(t, c, i32s(buf), 0, 7)
			_, err := q.Wait(testWait)
			q.Release()
			if !errors.Is(err, want) || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "rank 1") {
				t.Errorf("message %d: %v, want %v naming both ranks", i, err, want)
			}
			if buf[0] != -1 || buf[1] != -1 {
				t.Errorf("message %d: a refused message wrote %v into the buffer", i, buf)
			}
		}
		q := irecv(t, c, i32s(buf), 0, 7)
		st, err := q.Wait(testWait)
		q.Release()
		if err != nil || buf[0] != 5 || st != (backend.Status{Source: 0, Tag: 7, Count: 2}) {
			t.Errorf("the good message: %v, %v, %+v", buf, err, st)
		}
		// Tag selection: tag 8 was sent after the large tag 9 message.
		q = irecv(t, c, i32s(buf), 0, 8)
		st, err = q.Wait(testWait)
		q.Release()
		if err != nil || buf[0] != 7 || st.Tag != 8 {
			t.Errorf("tag 8 first: %v, %v, %+v", buf, err, st)
		}
		got := make([]byte, 1<<20)
		q = irecv(t, c, bufOf(got, backend.Uint8), 0, 9)
		st, err = q.Wait(testWait)
		q.Release()
		if err != nil || st.Count != 1<<20 || st.Tag != 9 {
			t.Errorf("the large message taken early: %v, %+v", err, st)
		}
	})
}

// TestFakeSelf: messages to oneself match by tag and complete the send
// at once, whatever the receive's state.
func TestFakeSelf(t *testing.T) {
	cs, _ := fakeJob(t, 1, false)
	c := cs[0]
	for i := range 3 {
		waitAll(t, isend(t, c, i32s([]int32{int32(i)}), 0, 1+i%2))
	}
	got := []int32{-1}
	for _, want := range []struct{ tag, v int }{{2, 1}, {1, 0}, {1, 2}} {
		q := irecv(t, c, i32s(got), 0, want.tag)
		st, err := q.Wait(testWait)
		q.Release()
		if err != nil || got[0] != int32(want.v) || st != (backend.Status{Source: 0, Tag: want.tag, Count: 1}) {
			t.Errorf("tag %d: %v, %v, %+v", want.tag, got, err, st)
		}
	}
	q := irecv(t, c, i32s(got), 0, 5)
	if done, _, _ := q.Test(); done {
		t.Error("a receive from self completed before the send")
	}
	waitAll(t, isend(t, c, i32s([]int32{9, 9}), 0, 5))
	if _, err := q.Wait(testWait); !errors.Is(err, backend.ErrTruncate) {
		t.Errorf("2 elements into 1: %v, want ErrTruncate", err)
	}
	q.Release()
	if err := WaitOn(irecv(t, c, i32s(got), 0, 6), nil); !errors.Is(err, backend.ErrInvalid) {
		t.Errorf("WaitOn(nil stream): %v", err)
	}
}

func TestFakeWildcards(t *testing.T) {
	cs, _ := fakeJob(t, 2, true)
	for _, pt := range [][2]int{{backend.AnySource, 0}, {1, backend.AnyTag}} {
		if _, err := cs[0].Irecv(i32s([]int32{0}), pt[0], pt[1], 0); !errors.Is(err, backend.ErrNotSupported) {
			t.Errorf("Irecv(%d, %d): %v, want ErrNotSupported", pt[0], pt[1], err)
		}
	}
	if _, err := cs[0].Isend(i32s([]int32{0}), 2, 0, 0); !errors.Is(err, backend.ErrInvalid) {
		t.Errorf("Isend to rank 2 of 2: %v", err)
	}
	dev := backend.Buffer{Ptr: unsafe.Pointer(&[1]byte{}), Count: 1, Type: backend.Uint8, Mem: backend.Device, Device: 3}
	if _, err := cs[0].Isend(dev, 1, 0, 0); !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), "cuda:3") {
		t.Errorf("a buffer on another GPU: %v", err)
	}
}

// TestFakePeerLost: a rank that sent a message and closed has delivered
// it; a receive of a message it never sent fails with ErrPeerLost soon.
// With checks, a small message sent before the close can even be received
// after it (it was taken off the wire early).
func TestFakePeerLost(t *testing.T) {
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprint("check=", check), func(t *testing.T) {
			cs, _ := fakeJob(t, 2, check)
			got, late := []int32{0}, []int32{0}
			q := irecv(t, cs[1], i32s(got), 0, 4)
			q.Test()
			var sends []backend.Request
			sends = append(sends, isend(t, cs[0], i32s([]int32{11}), 1, 4))
			if check {
				sends = append(sends, isend(t, cs[0], i32s([]int32{12}), 1, 6))
			}
			waitAll(t, sends...)
			closed := make(chan error)
			go func() { closed <- cs[0].Close() }()
			time.Sleep(50 * time.Millisecond)
			if _, err := q.Wait(testWait); err != nil || got[0] != 11 {
				t.Errorf("the message sent before Close: %v, %v", got, err)
			}
			q.Release()
			if check {
				waitAll(t, irecv(t, cs[1], i32s(late), 0, 6))
				if late[0] != 12 {
					t.Errorf("a message sent before Close, received after it: %v", late)
				}
			}
			start := time.Now()
			q, err := cs[1].Irecv(i32s(got), 0, 5, 0)
			if err == nil {
				_, err = q.Wait(testWait)
				q.Release()
			}
			if !errors.Is(err, backend.ErrPeerLost) {
				t.Errorf("a receive from the closed rank: %v, want ErrPeerLost", err)
			}
			if d := time.Since(start); d > 2*lostGrace+time.Second {
				t.Errorf("the lost rank was noticed after %v", d)
			}
			if _, err := cs[1].Isend(i32s(got), 0, 5, 0); !errors.Is(err, backend.ErrPeerLost) {
				t.Errorf("a send to the closed rank: %v, want ErrPeerLost", err)
			}
			cs[1].Close()
			if err := <-closed; err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

func TestFakeClose(t *testing.T) {
	cs, _ := fakeJob(t, 2, false)
	q := irecv(t, cs[0], i32s([]int32{0}), 1, 0)
	q.Test() // issued: on the GPU
	s := irecv(t, cs[0], i32s([]int32{0}), 0, 0)
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	for _, q := range []backend.Request{q, s} {
		if _, err := q.Wait(testWait); !errors.Is(err, backend.ErrClosed) {
			t.Errorf("pending receive after Close: %v", err)
		}
	}
	if _, err := cs[0].Isend(i32s([]int32{0}), 1, 0, 0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Isend after Close: %v", err)
	}
	if err := cs[0].Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestFakeZeroBytes(t *testing.T) {
	for _, check := range []bool{false, true} {
		cs, _ := fakeJob(t, 2, check)
		ranks(cs, func(r int, c *conn) {
			if r == 0 {
				waitAll(t, isend(t, c, i32s(nil), 1, 1), isend(t, c, i32s([]int32{3}), 1, 2))
				return
			}
			got := []int32{0}
			q := irecv(t, c, i32s(nil), 0, 1)
			st, err := q.Wait(testWait)
			q.Release()
			if err != nil || st != (backend.Status{Source: 0, Tag: 1, Count: 0}) {
				t.Errorf("check=%v: empty message: %+v, %v", check, st, err)
			}
			waitAll(t, irecv(t, c, i32s(got), 0, 2))
			if got[0] != 3 {
				t.Errorf("check=%v: the next message: %v", check, got)
			}
		})
	}
}

// TestFakeInternalTags: negative tags (the library's own, mp's Barrier)
// travel over the host connection, so a user's receive posted earlier
// does not take them.
func TestFakeInternalTags(t *testing.T) {
	cs, _ := fakeJob(t, 2, false)
	ranks(cs, func(r int, c *conn) {
		peer := 1 - r
		got := []int32{0}
		user := irecv(t, c, i32s(got), peer, 0)
		user.Test()
		token := []byte{0}
		s := isend(t, c, bufOf([]byte{1}, backend.Uint8), peer, -2)
		q := irecv(t, c, bufOf(token, backend.Uint8), peer, -2)
		waitAll(t, s, q)
		if token[0] != 1 {
			t.Errorf("rank %d: the internal message: %v", r, token)
		}
		waitAll(t, isend(t, c, i32s([]int32{int32(r + 1)}), peer, 0))
		waitAll(t, user)
		if got[0] != int32(peer+1) {
			t.Errorf("rank %d: the user message: %v", r, got)
		}
	})
}

// shortForm is what this package's tests leave out unless testscope.Full
// (fakegpu_test.go adds the fake GPU's part where cgo builds it, and
// empties it in the fake GPU's child processes).
var shortForm = "the fake engine's checked conformance suite runs on 3 ranks"

func TestMain(m *testing.M) {
	if shortForm != "" {
		if err := testscope.Announce("backend/nccl", shortForm); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	leakcheck.WarmCUDA()
	code := m.Run()
	closeGPUJob()
	// The fake GPU's child, or a real GPU: every communicator is closed,
	// and has freed its memory but the completion words a stream given to
	// WaitOn may still read.
	if dev, host := cuda.Live(); code == 0 && (dev != 0 || int64(host) != keptFlagWords.Load()) {
		fmt.Fprintf(os.Stderr, "FAIL: the tests left %d device and %d page-locked allocations (%d blocks of completion words kept for WaitOn)\n",
			dev, host, keptFlagWords.Load())
		code = 1
	}
	code = leakcheck.Check(code, "github.com/courier-mp/courier/backend/nccl.initBlocking.func1") // blocking inits left by a failed Open (TestFakeGPUChildOpenBounded)
	os.Exit(code)
}

// TestStagingIsBounded: many host messages posted at once go to NCCL in
// groups of at most stageCap bytes of host memory, each issued once the
// earlier ones are done, and all arrive.
func TestStagingIsBounded(t *testing.T) {
	cs, f := fakeJob(t, 2, false)
	const n, size = 8, 300 << 10
	for _, c := range cs {
		c.stageCap = 1 << 20
	}
	ranks(cs, func(r int, c *conn) {
		reqs := make([]backend.Request, n)
		bufs := make([][]byte, n)
		for i := range reqs {
			bufs[i] = make([]byte, size)
			if r == 0 {
				for j := range bufs[i] {
					bufs[i][j] = byte(i + j)
				}
				reqs[i] = isend(t, c, bufOf(bufs[i], backend.Uint8), 1, 0)
			} else {
				reqs[i] = irecv(t, c, bufOf(bufs[i], backend.Uint8), 0, 0)
			}
		}
		for i, q := range reqs {
			if _, err := q.Wait(testWait); err != nil {
				t.Errorf("rank %d: message %d: %v", r, i, err)
			}
			q.Release()
		}
		if r == 1 {
			for i := range bufs {
				for j, b := range bufs[i] {
					if b != byte(i+j) {
						t.Fatalf("message %d, byte %d: %d", i, j, b)
					}
				}
			}
		}
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	for r, e := range f.engines {
		if e.maxStaged > 1<<20 || e.maxStaged < size {
			t.Errorf("rank %d: a group staged %d bytes (cap %d, message %d)", r, e.maxStaged, 1<<20, size)
		}
	}
}

// TestIprobe: with checks, a message is known by its envelope before it is
// received (and stays for the receive); to oneself always; without checks
// or with wildcards, ErrNotSupported.
func TestIprobe(t *testing.T) {
	cs, _ := fakeJob(t, 2, true)
	msg := make([]int32, 1234)
	s := isend(t, cs[0], i32s(msg), 1, 7)
	s.Test() // hands the send to NCCL (an Isend is issued at the next wait or test)
	deadline := time.Now().Add(testWait)
	for {
		found, st, err := cs[1].Iprobe(0, 7)
		if err != nil {
			t.Fatal(err)
		}
		if found {
			if st != (backend.Status{Source: 0, Tag: 7, Count: 1234}) {
				t.Errorf("status %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the envelope never came")
		}
		time.Sleep(time.Millisecond)
	}
	if found, _, _ := cs[1].Iprobe(0, 8); found {
		t.Error("found a message with another tag")
	}
	q := irecv(t, cs[1], i32s(make([]int32, 1234)), 0, 7)
	if _, err := q.Wait(testWait); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(testWait); err != nil {
		t.Fatal(err)
	}
	if found, _, _ := cs[1].Iprobe(0, 7); found {
		t.Error("the received message is still found")
	}
	self := isend(t, cs[0], i32s(make([]int32, 3)), 0, 2)
	if found, st, err := cs[0].Iprobe(0, 2); !found || err != nil || st.Count != 3 {
		t.Errorf("probe of a message to oneself: %v %+v %v", found, st, err)
	}
	irecvDone(t, cs[0], 0, 2, 3)
	self.Wait(testWait)
	if _, _, err := cs[1].Iprobe(backend.AnySource, 7); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("AnySource: %v", err)
	}
	un, _ := fakeJob(t, 2, false)
	if _, _, err := un[1].Iprobe(0, 7); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("without checks: %v", err)
	}
}

// irecvDone receives n int32s from peer with tag on c and waits.
func irecvDone(t *testing.T, c *conn, peer, tag, n int) {
	t.Helper()
	q := irecv(t, c, i32s(make([]int32, n)), peer, tag)
	if _, err := q.Wait(testWait); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkFakePingPong measures the communicator's own cost per round
// trip of an 8-byte message (Isend and Wait, then Irecv and Wait, mirrored
// on the peer), on the fake engine: what courier adds to NCCL's latency on
// the CPU.
func BenchmarkFakePingPong(b *testing.B) {
	cs, _ := fakeJob(b, 2, false)
	bufs := [2][]int64{make([]int64, 1), make([]int64, 1)}
	round := func(r int, send bool) error {
		c, peer, buf := cs[r], 1-r, bufOf(bufs[r], backend.Int64)
		var (
			q   backend.Request
			err error
		)
		if send {
			q, err = c.Isend(buf, peer, 0, 0)
		} else {
			q, err = c.Irecv(buf, peer, 0, 0)
		}
		if err != nil {
			return err
		}
		if _, err = q.Wait(0); err != nil {
			return err
		}
		q.Release()
		return nil
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() {
			for i := 0; i < b.N && errs[r] == nil; i++ {
				if errs[r] = round(r, r == 0); errs[r] == nil {
					errs[r] = round(r, r == 1)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}
