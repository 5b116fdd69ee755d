package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/auth"
)

// newJobs describes a job of size ranks over loopback, rank 0 serving on a
// listener of its own.
func newJobs(t *testing.T, size int, key string) []Job {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]Job, size)
	for r := range jobs {
		jobs[r] = Job{Rank: r, Size: size, LocalRank: r, LocalSize: size, Launcher: "manual",
			Key: key, Addr: ln.Addr().String()}
	}
	jobs[0].Listener = ln
	return jobs
}

// connectAll runs Connect for every job at once.
func connectAll(ctx context.Context, jobs []Job) ([]Exchanger, []error) {
	ex := make([]Exchanger, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for r, j := range jobs {
		wg.Go(func() { ex[r], errs[r] = Connect(ctx, j) })
	}
	wg.Wait()
	return ex, errs
}

// mustConnect connects every job, and closes the exchangers when the test
// ends.
func mustConnect(t *testing.T, jobs []Job) []Exchanger {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, errs := connectAll(ctx, jobs)
	t.Cleanup(func() { closeAll(ex) })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Connect: %v", r, err)
		}
	}
	return ex
}

func closeAll(ex []Exchanger) {
	for _, e := range ex {
		if e != nil {
			e.Close()
		}
	}
}

// gatherAll runs one AllGather on each of ex at once, rank r contributing
// data(r).
func gatherAll(ctx context.Context, ex []Exchanger, data func(r int) []byte) ([][][]byte, []error) {
	out := make([][][]byte, len(ex))
	errs := make([]error, len(ex))
	var wg sync.WaitGroup
	for r, e := range ex {
		if e == nil {
			continue
		}
		wg.Go(func() { out[r], errs[r] = e.AllGather(ctx, data(r)) })
	}
	wg.Wait()
	return out, errs
}

// wantErr fails unless err wraps every one of targets and says every one
// of texts.
func wantErr(t *testing.T, who string, err error, targets []error, texts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", who)
		return
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("%s: error %q does not wrap %q", who, err, target)
		}
	}
	for _, text := range texts {
		if !strings.Contains(err.Error(), text) {
			t.Errorf("%s: error %q does not say %q", who, err, text)
		}
	}
}

func TestRendezvous(t *testing.T) {
	const size = 4
	ex := mustConnect(t, newJobs(t, size, "s3cret"))
	rounds := []func(r int) []byte{
		func(r int) []byte { return []byte(fmt.Sprintf("addr of rank %d", r)) },
		func(r int) []byte {
			if r == 2 {
				return nil
			}
			return []byte{byte(r)}
		},
		func(r int) []byte { return bytes.Repeat([]byte{byte('a' + r)}, MaxBlob-r) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, data := range rounds {
		out, errs := gatherAll(ctx, ex, data)
		for r := range size {
			if errs[r] != nil {
				t.Fatalf("round %d, rank %d: %v", i, r, errs[r])
			}
			if len(out[r]) != size {
				t.Fatalf("round %d, rank %d: %d blobs, want %d", i, r, len(out[r]), size)
			}
			for from, blob := range out[r] {
				if want := data(from); !bytes.Equal(blob, want) || blob == nil {
					t.Errorf("round %d, rank %d: blob of rank %d is %.20q (%d bytes), want %.20q (%d bytes)",
						i, r, from, blob, len(blob), want, len(want))
				}
			}
		}
	}
	for r, e := range ex {
		if err := e.Close(); err != nil {
			t.Errorf("rank %d: Close: %v", r, err)
		}
		if err := e.Close(); err != nil {
			t.Errorf("rank %d: second Close: %v", r, err)
		}
		if _, err := e.AllGather(ctx, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("rank %d: AllGather after Close: %v, want ErrClosed", r, err)
		}
	}
}

// TestRendezvousOnAddr lets rank 0 listen on Addr itself, after the others
// have started dialing it.
func TestRendezvousOnAddr(t *testing.T) {
	jobs := newJobs(t, 3, "")
	jobs[0].Listener.Close() // free the port; rank 0 binds it again
	jobs[0].Listener = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ex := make([]Exchanger, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for r := 1; r < len(jobs); r++ {
		wg.Go(func() { ex[r], errs[r] = Connect(ctx, jobs[r]) })
	}
	time.Sleep(100 * time.Millisecond) // the others retry meanwhile
	ex[0], errs[0] = Connect(ctx, jobs[0])
	wg.Wait()
	defer closeAll(ex)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	out, errs := gatherAll(ctx, ex, func(r int) []byte { return []byte{byte(r)} })
	for r := range ex {
		if errs[r] != nil || len(out[r]) != 3 || out[r][2][0] != 2 {
			t.Errorf("rank %d: %v, %v", r, out[r], errs[r])
		}
	}
}

func TestSingle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := Connect(context.Background(), Job{Rank: 0, Size: 1, Launcher: "single", Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); err == nil {
		t.Error("Connect left the listener of a single rank open")
	}
	data := []byte("alone")
	out, err := ex.AllGather(context.Background(), data)
	if err != nil || len(out) != 1 || string(out[0]) != "alone" {
		t.Fatalf("AllGather = %q, %v", out, err)
	}
	data[0] = 'A'
	if string(out[0]) != "alone" {
		t.Error("AllGather returned the caller's buffer, not a copy")
	}
	if out, err := ex.AllGather(context.Background(), nil); err != nil || out[0] == nil {
		t.Errorf("AllGather(nil) = %q, %v; want one empty blob", out, err)
	}
	if _, err := ex.AllGather(context.Background(), make([]byte, MaxBlob+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize AllGather: %v, want ErrTooLarge", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ex.AllGather(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("AllGather with a canceled context: %v", err)
	}
	ex.Close()
	ex.Close()
	if _, err := ex.AllGather(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("AllGather after Close: %v, want ErrClosed", err)
	}
}

func TestNoRendezvous(t *testing.T) {
	vars := []string{"SLURM_PROCID=1", "SLURM_NTASKS=4"}
	for _, job := range []Job{
		{Rank: 1, Size: 4, Launcher: "slurm", Vars: vars},
		{Rank: 0, Size: 4, Launcher: "slurm", Vars: vars},
	} {
		_, err := Connect(context.Background(), job)
		wantErr(t, fmt.Sprintf("rank %d", job.Rank), err, []error{ErrNoRendezvous},
			"COURIER_ADDR=host:port of rank 0", "courier run", "-tags mpi", "SLURM_PROCID=1 SLURM_NTASKS=4")
	}
}

func TestInvalidJob(t *testing.T) {
	for _, job := range []Job{{Rank: 0, Size: 0}, {Rank: 2, Size: 2}, {Rank: -1, Size: 2}, {Rank: 0, Size: maxRanks + 1}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		job.Listener = ln
		if _, err := Connect(context.Background(), job); err == nil || !strings.Contains(err.Error(), "invalid job") {
			t.Errorf("Connect(rank %d of %d) = %v, want invalid job", job.Rank, job.Size, err)
		}
		if _, err := ln.Accept(); err == nil {
			t.Error("Connect left the listener of an invalid job open")
		}
	}
}

func TestListenError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, addr := range []string{busy.Addr().String(), "256.0.0.1:1", "no-port"} {
		_, err := Connect(context.Background(), Job{Rank: 0, Size: 2, Addr: addr})
		wantErr(t, addr, err, nil, "rank 0 cannot listen", fmt.Sprintf("%q", addr))
	}
}

func TestBadAddrFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := Connect(ctx, Job{Rank: 1, Size: 2, Addr: "no-port"})
	wantErr(t, "rank 1", err, nil, "bad rendezvous address", `"no-port"`)
	if time.Since(start) > time.Second {
		t.Errorf("a malformed address took %v to fail", time.Since(start))
	}
}

// TestStrangers sends rank 0 a process of another job, one that speaks
// another protocol, and one that says nothing: each is turned away, or
// ignored, and the job completes.
func TestStrangers(t *testing.T) {
	jobs := newJobs(t, 3, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var rank0 Exchanger
	var err0 error
	var wg sync.WaitGroup
	wg.Go(func() { rank0, err0 = Connect(ctx, jobs[0]) })

	silent, err := net.Dial("tcp", jobs[1].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	http, err := net.Dial("tcp", jobs[1].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer http.Close()
	http.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))

	for _, key := range []string{"wrong", ""} {
		stranger := jobs[1]
		stranger.Key = key
		_, err := Connect(ctx, stranger)
		wantErr(t, "stranger", err, []error{ErrRefused}, "connection from another job: job key mismatch", jobs[1].Addr)
	}

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
	out, errs := gatherAll(ctx, ex, func(r int) []byte { return []byte{byte(r)} })
	for r := range ex {
		if errs[r] != nil || len(out[r]) != 3 {
			t.Errorf("rank %d after strangers: %v, %v", r, out[r], errs[r])
		}
	}
}

// TestImpostorRank0 has a rank reach a rendezvous of another job, whose
// rank 0 does not know the key: the rank refuses it.
func TestImpostorRank0(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		writeFrame(c, frameHello, helloPayload(auth.Nonce()))
		readFrame(c)
		forged := auth.Prove("another key", okContext, auth.Nonce())
		writeFrame(c, frameOK, forged[:], make([]byte, auth.NonceSize))
		readFrame(c) // until the rank hangs up
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Connect(ctx, Job{Rank: 1, Size: 2, Key: "s3cret", Addr: ln.Addr().String()})
	wantErr(t, "rank 1", err, []error{ErrRefused}, "does not know this job's key")
	<-done
}

func TestDuplicateRank(t *testing.T) {
	t.Parallel() // waits more than it computes
	for _, dup := range []int{1, 0} {
		t.Run(fmt.Sprint("rank ", dup), func(t *testing.T) {
			jobs := newJobs(t, 3, "s3cret")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			// Rank 0 has a context of its own: once the twin is refused,
			// no rank is left to come, so it ends rank 0's wait for late
			// ranks (failLinger).
			ctx0, cancel0 := context.WithCancel(ctx)
			defer cancel0()
			var err0 error
			var wg sync.WaitGroup
			wg.Go(func() {
				ex, err := Connect(ctx0, jobs[0])
				if err == nil {
					ex.Close()
				}
				err0 = err
			})
			first, err := Connect(ctx, jobs[1])
			if err != nil {
				t.Fatalf("rank 1: %v", err)
			}
			defer first.Close()

			twin := jobs[1]
			twin.Rank = dup // join, since Connect would serve rank 0
			_, err = join(ctx, twin, twin.Key)
			text := fmt.Sprintf("rank %d joined twice", dup)
			wantErr(t, "the twin", err, []error{ErrRefused}, text)
			cancel0()
			wg.Wait()
			wantErr(t, "rank 0", err0, []error{ErrRefused}, text)

			start := time.Now()
			_, err = first.AllGather(ctx, []byte("x"))
			wantErr(t, "the first rank 1", err, []error{ErrRefused}, text)
			if d := time.Since(start); d > time.Second {
				t.Errorf("the first rank 1 learnt it after %v", d)
			}
		})
	}
}

func TestSizeMismatch(t *testing.T) {
	jobs := newJobs(t, 4, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err0 error
	var wg sync.WaitGroup
	wg.Go(func() { _, err0 = Connect(ctx, jobs[0]) })
	wrong := jobs[1]
	wrong.Size = 3
	_, err := Connect(ctx, wrong)
	// Refused, the wrong rank has ended the admission, and no other rank
	// is coming: the end of rank 0's context ends its wait for late ranks
	// (failLinger), as it would at the caller's deadline.
	cancel()
	wg.Wait()
	const text = "size mismatch: rank 0 has 4, you said 3"
	wantErr(t, "rank 1", err, []error{ErrRefused}, text)
	wantErr(t, "rank 0", err0, []error{ErrRefused}, text)
}

// TestPeerLost loses a rank in the middle of a round: every other rank's
// AllGather fails within a second, naming it.
func TestPeerLost(t *testing.T) {
	t.Parallel() // waits more than it computes
	for _, how := range []string{"closes", "dies mid-frame", "sends a huge header"} {
		t.Run(how, func(t *testing.T) {
			ex := mustConnect(t, newJobs(t, 4, "s3cret"))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, errs := gatherAll(ctx, ex, func(int) []byte { return []byte("round 1") }); errors.Join(errs...) != nil {
				t.Fatal(errors.Join(errs...))
			}

			var lostAt time.Time
			var wg sync.WaitGroup
			wg.Go(func() {
				time.Sleep(100 * time.Millisecond)
				lostAt = time.Now()
				c := ex[3].(*client)
				switch how {
				case "dies mid-frame":
					c.conn.Write(append(header(frameBlob, 100), "only part of it"...))
				case "sends a huge header":
					c.conn.Write(header(frameBlob, 1<<32-1))
				}
				c.Close()
			})
			_, errs := gatherAll(ctx, ex[:3], func(int) []byte { return []byte("round 2") })
			wg.Wait()
			took := time.Since(lostAt)
			for r, err := range errs {
				wantErr(t, fmt.Sprint("rank ", r), err, []error{ErrPeerLost}, "rank 3")
			}
			if how == "sends a huge header" {
				wantErr(t, "rank 0", errs[0], []error{ErrTooLarge})
			}
			if took > time.Second {
				t.Errorf("the ranks learnt after %v", took)
			}
			// The failure sticks.
			if _, err := ex[1].AllGather(ctx, nil); !errors.Is(err, ErrPeerLost) {
				t.Errorf("rank 1, next round: %v", err)
			}
		})
	}
}

// TestRank0Lost closes rank 0 while the others wait in a round.
func TestRank0Lost(t *testing.T) {
	ex := mustConnect(t, newJobs(t, 3, "s3cret"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	time.AfterFunc(100*time.Millisecond, func() { ex[0].Close() })
	_, errs := gatherAll(ctx, ex[1:], func(int) []byte { return []byte("x") })
	for r, err := range errs {
		wantErr(t, fmt.Sprint("rank ", r+1), err, []error{ErrPeerLost}, "rank 0")
	}
}

// TestRankNeverJoins gives the rendezvous a deadline that a rank misses.
func TestRankNeverJoins(t *testing.T) {
	t.Parallel() // waits more than it computes
	jobs := newJobs(t, 3, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	ex, errs := connectAll(ctx, jobs[:2])
	defer closeAll(ex)
	if d := time.Since(start); d > 1300*time.Millisecond {
		t.Errorf("Connect returned %v after a deadline of 300ms", d)
	}
	wantErr(t, "rank 0", errs[0], []error{ErrPeerLost, context.DeadlineExceeded}, "ranks [2]")
	if errs[1] != nil {
		t.Fatalf("rank 1: %v", errs[1])
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	start = time.Now()
	_, err := ex[1].AllGather(ctx2, []byte("x"))
	wantErr(t, "rank 1", err, []error{ErrPeerLost}, "rank 0 gave up waiting for ranks [2]")
	if d := time.Since(start); d > time.Second {
		t.Errorf("rank 1 learnt after %v", d)
	}
}

// TestNoRank0 dials a rank 0 that never comes, until the deadline.
func TestNoRank0(t *testing.T) {
	t.Parallel() // waits more than it computes
	jobs := newJobs(t, 2, "s3cret")
	jobs[0].Listener.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Connect(ctx, jobs[1])
	wantErr(t, "rank 1", err, []error{context.DeadlineExceeded}, "rank 0 did not answer", jobs[1].Addr)
	if d := time.Since(start); d > 1300*time.Millisecond {
		t.Errorf("Connect returned %v after a deadline of 300ms", d)
	}
}

// TestContextEndsAllGather cuts pending AllGathers short on either side.
func TestContextEndsAllGather(t *testing.T) {
	for _, waiter := range []int{0, 1} {
		t.Run(fmt.Sprint("rank ", waiter), func(t *testing.T) {
			ex := mustConnect(t, newJobs(t, 2, "s3cret"))
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := ex[waiter].AllGather(ctx, []byte("x"))
			wantErr(t, "waiter", err, []error{context.DeadlineExceeded}, "interrupted")
			if d := time.Since(start); d > time.Second {
				t.Errorf("AllGather returned %v after a deadline of 100ms", d)
			}
			// The other side then finds its peer gone: at once, or, when
			// rank 1 had sent its blob before it gave up, in the round after.
			ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel2()
			_, err = ex[1-waiter].AllGather(ctx2, []byte("y"))
			if err == nil && waiter == 1 {
				_, err = ex[0].AllGather(ctx2, []byte("z"))
			}
			wantErr(t, "the other", err, []error{ErrPeerLost}, fmt.Sprint("rank ", waiter))
		})
	}
}

// TestContextDoneBeforeAllGather leaves the exchanger usable: nothing was
// sent.
func TestContextDoneBeforeAllGather(t *testing.T) {
	ex := mustConnect(t, newJobs(t, 2, "s3cret"))
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for r, e := range ex {
		if _, err := e.AllGather(done, nil); !errors.Is(err, context.Canceled) {
			t.Errorf("rank %d: %v, want context.Canceled", r, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, errs := gatherAll(ctx, ex, func(int) []byte { return nil }); errors.Join(errs...) != nil {
		t.Error(errors.Join(errs...))
	}
}

func TestOversizeBlob(t *testing.T) {
	ex := mustConnect(t, newJobs(t, 2, "s3cret"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for r, e := range ex {
		_, err := e.AllGather(ctx, make([]byte, MaxBlob+1))
		wantErr(t, fmt.Sprint("rank ", r), err, []error{ErrTooLarge}, fmt.Sprint(MaxBlob+1))
	}
	// Refused before anything was sent: the exchanger still works.
	if _, errs := gatherAll(ctx, ex, func(int) []byte { return make([]byte, MaxBlob) }); errors.Join(errs...) != nil {
		t.Error(errors.Join(errs...))
	}
}

// TestHugeHeaderFromRank0 has a rank 0 that knows the key announce a 4 GiB
// blob: the rank refuses it without allocating it.
func TestHugeHeaderFromRank0(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		s := &server{key: "s3cret", size: 2, conns: make([]net.Conn, 2)}
		m, err := s.challenge(c)
		if err != nil {
			return
		}
		if seated, _ := s.seat(joiner{conn: c, msg: m}); !seated {
			return
		}
		readFrame(c)
		c.Write(header(frameBlob, 1<<32-1))
		readFrame(c) // until the rank hangs up
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := Connect(ctx, Job{Rank: 1, Size: 2, Key: "s3cret", Addr: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = ex.AllGather(ctx, []byte("x"))
	runtime.ReadMemStats(&after)
	wantErr(t, "rank 1", err, []error{ErrTooLarge, ErrPeerLost}, "rank 0")
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("AllGather allocated %d bytes", grew)
	}
	ex.Close()
	<-done
}

// TestCloseDuringAllGather closes an exchanger from another goroutine while
// its AllGather waits.
func TestCloseDuringAllGather(t *testing.T) {
	for _, r := range []int{0, 1} {
		t.Run(fmt.Sprint("rank ", r), func(t *testing.T) {
			ex := mustConnect(t, newJobs(t, 2, "s3cret"))
			time.AfterFunc(100*time.Millisecond, func() { ex[r].Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			_, err := ex[r].AllGather(ctx, []byte("x"))
			wantErr(t, "AllGather", err, []error{ErrClosed})
			if d := time.Since(start); d > time.Second {
				t.Errorf("AllGather returned %v after Close", d)
			}
		})
	}
}
