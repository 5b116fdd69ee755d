//go:build cgo

package nccl

import (
	"bytes"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// The IPC path on the real engine and C layer over the fake GPU: the
// child of TestFakeGPU that runs these sets COURIER_DEVICE=0, so every
// rank of a job uses fake GPU 0, and the fake maps exported device memory
// again at an address of its own (a memory file), as a GPU's IPC does in
// another process.

// sharedGPUJob opens an n-rank job whose ranks share one GPU, and checks that
// they meet through the IPC path, with no channel between them.
func sharedGPUJob(t *testing.T, n int, check bool) []*conn {
	t.Helper()
	fakeGPUChild(t)
	if os.Getenv(DeviceEnv) != "0" {
		t.Skipf("runs in the child of TestFakeGPU with %s=0", DeviceEnv)
	}
	cs := realJob(t, n, check)
	for _, c := range cs {
		for p := range n {
			if p != c.rank && c.ipcPeerOf(p) == nil {
				t.Fatalf("rank %d: rank %d shares its GPU but is not on the IPC path", c.rank, p)
			}
		}
		if c.world {
			t.Fatalf("rank %d has a communicator of every rank, which NCCL cannot make on one GPU", c.rank)
		}
	}
	return cs
}

// Device and host memory, inline and exported, both ways at once and one
// way, with and without checks; a message longer than its receive is
// ErrTruncate even without checks.
func TestFakeGPUChildIPC(t *testing.T) {
	for _, check := range []bool{false, true} {
		cs := sharedGPUJob(t, 2, check)
		for r, c := range cs {
			if got := [3]string{c.Transport(r), c.Transport(1 - r), c.Transport(2)}; got != [3]string{"self", "cuda-ipc", ""} {
				t.Errorf("rank %d: Transport of itself, its peer, rank 2: %q", r, got)
			}
		}
		for _, n := range []int{0, 8, ipcInline, ipcInline + 1, 3 << 20} {
			for _, dev := range []bool{false, true} {
				ranks(cs, func(r int, c *conn) {
					peer := 1 - r
					out, in := pattern(n, uint64(n+r)), make([]byte, n)
					sb, rb := bufOf(out, backend.Uint8), bufOf(in, backend.Uint8)
					var ds, dr cuda.Slice[byte]
					if dev {
						ds, dr = devBuf(t, c, int64(n)), devBuf(t, c, int64(n))
						toDevice(t, ds, out)
						sb, rb = devDesc(c, ds), devDesc(c, dr)
					}
					// Both ways at once: the receive first, as Sendrecv does.
					q := irecv(t, c, rb, peer, 7)
					s := isend(t, c, sb, peer, 7)
					st, err := q.Wait(testWait)
					q.Release()
					waitAll(t, s)
					if err != nil || st != (backend.Status{Source: peer, Tag: 7, Count: int64(n)}) {
						t.Errorf("check=%v, %d bytes, device %v: %v, %+v", check, n, dev, err, st)
						return
					}
					if dev {
						in = fromDevice(t, dr)
					}
					if !bytes.Equal(in, pattern(n, uint64(n+peer))) {
						t.Errorf("check=%v, %d bytes, device %v: wrong data", check, n, dev)
					}
				})
			}
		}
		// Too long for its receive, inline and exported.
		for _, n := range []int{64, 1 << 20} {
			ranks(cs, func(r int, c *conn) {
				d := devBuf(t, c, int64(n))
				if r == 0 {
					waitAll(t, isend(t, c, devDesc(c, d), 1, 8))
					return
				}
				short, _ := d.Sub(0, int64(n/2))
				q := irecv(t, c, devDesc(c, short), 0, 8)
				_, err := q.Wait(testWait)
				q.Release()
				if !errors.Is(err, backend.ErrTruncate) {
					t.Errorf("check=%v: %d bytes into %d: %v, want ErrTruncate", check, n, n/2, err)
				}
			})
		}
	}
}

// A send buffer freed and another allocated at the same address,
// between two messages: the second message's data arrives, never the
// first's through a stale mapping. Thousands of distinct buffers keep the
// receiver's open mappings within ipcCacheMax.
func TestFakeGPUChildIPCMappings(t *testing.T) {
	cs := sharedGPUJob(t, 2, false)
	const n = 1 << 20
	var addrs [2]uintptr
	d := devBuf(t, cs[1], n) // before: no other allocation between rank 0's two
	for i := range 2 {
		ranks(cs, func(r int, c *conn) {
			if r == 0 {
				s, err := cuda.Alloc[byte](cuda.Device(c.dev), n)
				if err != nil {
					t.Error(err)
					return
				}
				addrs[i] = s.Ptr()
				toDevice(t, s, pattern(n, uint64(100+i)))
				waitAll(t, isend(t, c, devDesc(c, s), 1, 1))
				if err := s.Free(); err != nil {
					t.Error(err)
				}
				return
			}
			waitAll(t, irecv(t, c, devDesc(c, d), 0, 1))
			if !bytes.Equal(fromDevice(t, d), pattern(n, uint64(100+i))) {
				t.Errorf("message %d: wrong data (a stale mapping?)", i)
			}
		})
	}
	if addrs[0] != addrs[1] {
		// The fake reuses a freed allocation's address for the next of
		// its size: without that, this would test nothing.
		t.Fatalf("the second allocation is at %#x, the first was at %#x", addrs[1], addrs[0])
	}
	const buffers = 300
	ranks(cs, func(r int, c *conn) {
		if r == 0 {
			for i := range buffers {
				s, err := cuda.Alloc[byte](cuda.Device(c.dev), ipcInline+8)
				if err != nil {
					t.Error(err)
					return
				}
				toDevice(t, s, pattern(ipcInline+8, uint64(i)))
				waitAll(t, isend(t, c, devDesc(c, s), 1, 2))
				s.Free()
			}
			return
		}
		d := devBuf(t, c, ipcInline+8)
		for i := range buffers {
			waitAll(t, irecv(t, c, devDesc(c, d), 0, 2))
			if i%100 == 0 && !bytes.Equal(fromDevice(t, d), pattern(ipcInline+8, uint64(i))) {
				t.Errorf("buffer %d: wrong data", i)
			}
		}
	})
	if open := cs[1].ipc.mem.(*cudaIPC).open(0); open > ipcCacheMax {
		t.Errorf("rank 1 keeps %d mappings of rank 0's memory open, more than %d", open, ipcCacheMax)
	}
	// Every one of those buffers was freed after its send: rank 0 told
	// rank 1 to forget each (a forget DESC), so that its mapping does not
	// keep the memory. A last message from a buffer that stays comes after
	// those DESCs and is copied after them: once it has arrived, rank 1
	// holds its mapping alone.
	ranks(cs, func(r int, c *conn) {
		d := devBuf(t, c, 64)
		if r == 0 {
			waitAll(t, isend(t, c, devDesc(c, d), 1, 3))
			return
		}
		waitAll(t, irecv(t, c, devDesc(c, d), 0, 3))
		if open := c.ipc.mem.(*cudaIPC).open(0); open != 1 {
			t.Errorf("rank 1 keeps %d mappings of rank 0's memory open after rank 0 freed all but one", open)
		}
	})
}

// A rank that aborts while its peer waits: the peer's receive of a message
// never sent, and its send that was never received, end with ErrPeerLost.
func TestFakeGPUChildIPCPeerLost(t *testing.T) {
	cs := sharedGPUJob(t, 2, false)
	d := devBuf(t, cs[1], 1<<20)
	q := irecv(t, cs[1], devDesc(cs[1], d), 0, 3)
	s := isend(t, cs[1], devDesc(cs[1], d), 0, 4)
	cs[0].Abort(errors.New("rank 0 gives up"))
	for _, r := range []backend.Request{q, s} {
		if _, err := r.Wait(testWait); !errors.Is(err, backend.ErrPeerLost) {
			t.Errorf("%v, want ErrPeerLost", err)
		}
		r.Release()
	}
}

// Stream-ordered operations: IsendOn after a kernel-like copy on the
// sender's stream, IrecvOn whose stream then copies the data on, WaitOn
// for a plain receive.
func TestFakeGPUChildIPCStreams(t *testing.T) {
	cs := sharedGPUJob(t, 2, false)
	const n = 1 << 20
	ranks(cs, func(r int, c *conn) {
		s := mustStream(t, c)
		a, b := devBuf(t, c, n), devBuf(t, c, n)
		if r == 0 {
			src := devBuf(t, c, n)
			toDevice(t, src, pattern(n, 5))
			// a is written on s, and the send ordered after it.
			if err := cuda.CopyDeviceAsync(a, src, s); err != nil {
				t.Error(err)
			}
			q, err := c.IsendOn(devDesc(c, a), 1, 1, 0, s)
			if err != nil {
				t.Error(err)
				return
			}
			waitAll(t, q)
			waitAll(t, isend(t, c, devDesc(c, src), 1, 2))
			return
		}
		q, err := c.IrecvOn(devDesc(c, a), 0, 1, 0, s)
		if err != nil {
			t.Error(err)
			return
		}
		if err := cuda.CopyDeviceAsync(b, a, s); err != nil { // after the receive, on the GPU
			t.Error(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Error(err)
		}
		waitAll(t, q)
		if !bytes.Equal(fromDevice(t, b), pattern(n, 5)) {
			t.Error("IrecvOn: the stream's copy did not see the message")
		}
		q2 := irecv(t, c, devDesc(c, a), 0, 2)
		if err := WaitOn(q2, s); err != nil {
			t.Errorf("WaitOn: %v", err)
		}
		if err := cuda.CopyDeviceAsync(b, a, s); err != nil {
			t.Error(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Error(err)
		}
		waitAll(t, q2)
		if !bytes.Equal(fromDevice(t, b), pattern(n, 5)) {
			t.Error("WaitOn: the stream's copy did not see the message")
		}
	})
}

// Receives in a row on one stream: the stream waits for each receive's
// completion before the next's copy may start (IrecvOnStream), so the
// copier must finish the earlier receives while a later one waits for the
// stream. In even rounds the messages come in the order of the receives,
// and are in before the receives are posted, so that all match at once (a
// batch that held them all, finished once all had run, never was); in odd
// rounds the receives are posted first and the messages come in the
// opposite order, each with a tag of its own, so the later receives match
// first (a copy that waited for the stream on the GPU, ahead of the
// earlier receives' copies on one copy stream, waited for ever).
func TestFakeGPUChildIPCStreamsInARow(t *testing.T) {
	cs := sharedGPUJob(t, 2, false)
	const n, rounds, inRow = 4096, 20, 3
	ranks(cs, func(r int, c *conn) {
		s := mustStream(t, c)
		bufs := make([]cuda.Slice[byte], inRow)
		for k := range bufs {
			bufs[k] = devBuf(t, c, n)
		}
		token := bufOf(make([]byte, 1), backend.Uint8)
		for round := range rounds {
			reversed := round%2 == 1
			if r == 0 {
				waitAll(t, irecv(t, c, token, 1, 2)) // go
				var qs []backend.Request
				for i := range bufs {
					k := i
					if reversed {
						k = inRow - 1 - i
					}
					toDevice(t, bufs[k], pattern(n, uint64(round*inRow+k)))
					qs = append(qs, isend(t, c, devDesc(c, bufs[k]), 1, 10+k))
				}
				waitAll(t, qs...)
				continue
			}
			if !reversed {
				waitAll(t, isend(t, c, token, 0, 2))
				time.Sleep(5 * time.Millisecond) // the DESCs are in
			}
			var qs []backend.Request
			for k, b := range bufs {
				q, err := c.IrecvOn(devDesc(c, b), 0, 10+k, 0, s)
				if err != nil {
					t.Fatal(err)
				}
				qs = append(qs, q)
			}
			if reversed {
				waitAll(t, isend(t, c, token, 0, 2))
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			waitAll(t, qs...)
			for k, b := range bufs {
				if !bytes.Equal(fromDevice(t, b), pattern(n, uint64(round*inRow+k))) {
					t.Fatalf("round %d: receive %d does not hold message %d", round, k, k)
				}
			}
		}
	})
}

// A receive the copier has taken, here one whose copy waits for its
// stream (which waits for an earlier receive that has no message yet), is
// still in the pending-operation report.
func TestFakeGPUChildIPCPendingCopy(t *testing.T) {
	cs := sharedGPUJob(t, 2, false)
	const n = 4096
	ranks(cs, func(r int, c *conn) {
		s := mustStream(t, c)
		a, b := devBuf(t, c, n), devBuf(t, c, n)
		token := bufOf(make([]byte, 1), backend.Uint8)
		if r == 0 {
			waitAll(t, irecv(t, c, token, 1, 3))
			toDevice(t, b, pattern(n, 2))
			qb := isend(t, c, devDesc(c, b), 1, 2) // copied only after a's
			waitAll(t, irecv(t, c, token, 1, 3))
			toDevice(t, a, pattern(n, 1))
			waitAll(t, isend(t, c, devDesc(c, a), 1, 1), qb)
			return
		}
		qa, err := c.IrecvOn(devDesc(c, a), 0, 1, 0, s)
		if err != nil {
			t.Fatal(err)
		}
		qb, err := c.IrecvOn(devDesc(c, b), 0, 2, 0, s)
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, isend(t, c, token, 0, 3))
		ip := c.ipcPeerOf(0)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			c.mu.Lock()
			taken := len(ip.posted) == 1 && len(ip.work) == 0 && len(ip.msgs) == 0
			c.mu.Unlock()
			if taken {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the message of tag 2 was not taken by the copier")
			}
		}
		tags := map[int]bool{}
		for _, op := range c.Pending() {
			if op.Op == "recv" && op.Peer == 0 {
				tags[op.Tag] = true
			}
		}
		if !tags[1] || !tags[2] {
			t.Errorf("Pending lists the receives of tags %v, want 1 (posted) and 2 (taken, waiting for its stream)", tags)
		}
		waitAll(t, isend(t, c, token, 0, 3))
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		waitAll(t, qa, qb)
		if !bytes.Equal(fromDevice(t, a), pattern(n, 1)) || !bytes.Equal(fromDevice(t, b), pattern(n, 2)) {
			t.Error("the receives do not hold their messages")
		}
	})
}

// TestFakeGPUChildIPCMarks: the copies' marks are words the copy stream
// writes where the driver has stream memory operations, events where it
// has not (FAKEGPU_NO_MEMOPS=1) and with EventsEnv=1; with words, a
// fault on the GPU while a copy waits on its stream (so its word is never
// written) fails the receive with the driver's error, not never.
func TestFakeGPUChildIPCMarks(t *testing.T) {
	words := os.Getenv("FAKEGPU_NO_MEMOPS") != "1"
	for _, events := range []bool{false, true} {
		if events {
			t.Setenv(EventsEnv, "1")
		}
		cs := sharedGPUJob(t, 2, false)
		for r, c := range cs {
			m := c.ipc.mem.(*cudaIPC)
			if got, want := m.tally != nil, words && !events; got != want {
				t.Errorf("%s=%v, memory operations %v: rank %d's marks are words: %v, want %v", EventsEnv, events, words, r, got, want)
			}
		}
	}
	if !words {
		return
	}
	t.Setenv(EventsEnv, "")
	cs := sharedGPUJob(t, 2, false)
	m := cs[1].ipc.mem.(*cudaIPC)
	if m.tally == nil {
		t.Fatal("the marks are not words")
	}
	// Before the gate's cleanup, so freed after it: the copy runs once
	// the gate opens.
	src, dst := devBuf(t, cs[0], 1<<16), devBuf(t, cs[1], 1<<16)
	// Rank 1's copy stream from rank 0 waits for a word nobody writes
	// (until the test ends), so the copy queued behind it never runs.
	gate, err := cuda.HostAlloc[uint64](1)
	if err != nil {
		t.Fatal(err)
	}
	clear(gate.Slice())
	at, err := gate.DevicePtr()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.streams[0].WaitValue64(at, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Unsetenv("FAKEGPU_FAULT")
		atomic.StoreUint64(&gate.Slice()[0], 1) // let the stream go, for Close
		m.streams[0].Synchronize()
		gate.Free()
	})
	t.Setenv("FAKEGPU_FAULT", "1")
	sq := isend(t, cs[0], devDesc(cs[0], src), 1, 1)
	rq := irecv(t, cs[1], devDesc(cs[1], dst), 0, 1)
	awaitFault(t, rq, "a receive whose copy waits on a faulted GPU")
	rq.Release()
	// The sender hears of the failed copy (its DONE) and completes.
	if _, err := sq.Wait(10 * time.Second); err != nil {
		t.Errorf("the send: %v", err)
	}
	sq.Release()
}
