package mp_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/internal/trace"
	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

// nextLine is the line after the caller's: where the call it precedes
// is made.
func nextLine() int {
	_, _, line, _ := runtime.Caller(1)
	return line + 1
}

// spansOf returns the spans of f named name.
func spansOf(f *trace.File, name string) []trace.Event {
	var out []trace.Event
	for _, e := range f.TraceEvents {
		if e.Ph == "X" && e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// threadNames maps the tids of f's rank to their names.
func threadNames(f *trace.File) map[int]string {
	names := map[int]string{}
	for _, e := range f.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			names[e.Tid] = e.Args.Name
		}
	}
	return names
}

// TestTraceRecordsOperations: with tracing on, every rank writes its
// file at Close, and the spans say what was called, with whom, how many
// bytes, where, and when: posted before completed.
func TestTraceRecordsOperations(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "run.%r.json")
	lines := make([]map[string]int, 2) // per rank, the line of each call
	mptest.Run(t, 2, func(t *testing.T, c *mp.Comm) {
		require.True(t, c.Tracing())
		me, peer := c.Rank(), 1-c.Rank()
		at := map[string]int{}
		lines[me] = at
		buf := make([]float32, 4)
		if me == 0 {
			at["Send"] = nextLine()
			require.NoError(t, mp.Send(c, buf, peer, 7))
			at["Recv"] = nextLine()
			_, err := mp.Recv(c, make([]int64, 8), mp.AnySource, 8)
			require.NoError(t, err)
		} else {
			at["Recv"] = nextLine()
			_, err := mp.Recv(c, buf, peer, 7)
			require.NoError(t, err)
			at["Send"] = nextLine()
			require.NoError(t, mp.Send(c, make([]int64, 3), peer, 8)) // 24 bytes into a buffer of 64
		}
		in, out := make([]byte, 100), make([]byte, 100)
		at["Irecv"] = nextLine()
		r := mp.Irecv(c, in, peer, 1)
		at["Isend"] = nextLine()
		s := mp.Isend(c, out, peer, 1)
		require.NoError(t, mp.WaitAll(r, s))
		at["Sendrecv"] = nextLine()
		_, err := mp.Sendrecv(c, make([]int32, 5), peer, 2, make([]int32, 5), peer, 2)
		require.NoError(t, err)
		span := c.Trace("compute")
		x := make([]float64, 16)
		at["Allreduce"] = nextLine()
		require.NoError(t, mp.Allreduce(c, x, x, mp.Sum))
		span.End()
		at["Iallreduce"] = nextLine()
		q, err := mp.Iallreduce(c, x, x, mp.Max)
		require.NoError(t, err)
		_, err = q.Wait()
		require.NoError(t, err)
		at["Barrier"] = nextLine()
		require.NoError(t, mp.Barrier(c))
	}, mptest.WithInitOptions(mp.WithTrace(spec)))

	for rank := range 2 {
		f, err := trace.ReadFile(filepath.Join(dir, "run."+strconv.Itoa(rank)+".json"))
		require.NoError(t, err, "rank %d's file", rank)
		peer := 1 - rank
		m := f.OtherData
		require.Len(t, m.Ranks, 1)
		assert.Equal(t, rank, m.Ranks[0].Rank)
		assert.Equal(t, 2, m.Ranks[0].Size)
		assert.Equal(t, os.Getpid(), m.Ranks[0].PID)
		assert.Zero(t, m.Ranks[0].Dropped)
		assert.NotZero(t, m.OriginUnixNano)

		names := threadNames(f)
		assert.Equal(t, "host", names[0], "rank %d's first thread", rank)
		for _, e := range f.TraceEvents {
			assert.Equal(t, rank, e.Pid, "every event of rank %d's file is its", rank)
			if e.Ph != "X" {
				continue
			}
			require.NotNil(t, e.Dur)
			assert.GreaterOrEqual(t, *e.Dur, 0.0, "%s: posted after it completed", e.Name)
			assert.False(t, e.Args.Pending, "%s is pending", e.Name)
			assert.Empty(t, e.Args.Error, "%s", e.Name)
			assert.Equal(t, "host", e.Args.Track)
			assert.Contains(t, names[e.Tid], "host", "%s's thread", e.Name)
		}

		one := func(name string) trace.Event {
			t.Helper()
			s := spansOf(f, name)
			require.Len(t, s, 1, "rank %d's %s spans", rank, name)
			assert.Equal(t, "trace_test.go:"+strconv.Itoa(lines[rank][name]), filepath.Base(s[0].Args.Caller), "rank %d's %s", rank, name)
			assert.Contains(t, s[0].Args.Func, "TestTraceRecordsOperations")
			return s[0]
		}
		p2p := func(e trace.Event, peer, tag int, bytes int64) {
			t.Helper()
			assert.Equal(t, trace.CatP2P, e.Cat)
			require.NotNil(t, e.Args.Peer)
			assert.Equal(t, peer, *e.Args.Peer, "%s's peer", e.Name)
			assert.Equal(t, tag, *e.Args.Tag, "%s's tag", e.Name)
			assert.Equal(t, bytes, *e.Args.Bytes, "%s's bytes", e.Name)
		}
		if rank == 0 {
			p2p(one("Send"), 1, 7, 16)
			recv := one("Recv")
			p2p(recv, 1, 8, 24) // the sender and the bytes that came, not the buffer's 64
			assert.True(t, recv.Args.AnySource)
		} else {
			p2p(one("Recv"), 0, 7, 16)
			p2p(one("Send"), 0, 8, 24)
		}
		p2p(one("Irecv"), peer, 1, 100)
		p2p(one("Isend"), peer, 1, 100)
		sr := one("Sendrecv")
		p2p(sr, peer, 2, 20)
		assert.Equal(t, peer, *sr.Args.Source)
		assert.Equal(t, int64(20), *sr.Args.RecvBytes)

		for _, name := range []string{"Allreduce", "Iallreduce", "Barrier"} {
			e := one(name)
			assert.Equal(t, trace.CatColl, e.Cat, name)
			assert.Nil(t, e.Args.Peer, name)
		}
		ar := one("Allreduce")
		assert.Equal(t, int64(128), *ar.Args.Bytes)
		assert.Equal(t, int64(128), *ar.Args.RecvBytes)

		compute := spansOf(f, "compute")
		require.Len(t, compute, 1)
		assert.Equal(t, trace.CatUser, compute[0].Cat)
		// The program's span holds the Allreduce called inside it, on the
		// same lane.
		assert.LessOrEqual(t, compute[0].Ts, ar.Ts)
		assert.GreaterOrEqual(t, compute[0].Ts+*compute[0].Dur, ar.Ts+*ar.Dur)
		assert.Equal(t, compute[0].Tid, ar.Tid)

		// The calls come in program order: each posted after the one before
		// completed.
		order := []string{"Send", "Recv"}
		if rank == 1 {
			order = []string{"Recv", "Send"}
		}
		var last float64
		for _, name := range append(order, "Irecv", "Sendrecv", "Allreduce", "Iallreduce", "Barrier") {
			e := one(name)
			assert.GreaterOrEqual(t, e.Ts, last, "rank %d: %s posted before the call ahead of it completed", rank, name)
			last = e.Ts + *e.Dur
		}
	}
}

// TestTraceRing: a rank keeps the newest spans up to its capacity, and
// its file counts the ones it dropped.
func TestTraceRing(t *testing.T) {
	defer mp.SetTraceCapacity(4)()
	dir := t.TempDir()
	mptest.Run(t, 1, func(t *testing.T, c *mp.Comm) {
		for i := range 10 {
			c.Trace("step " + strconv.Itoa(i)).End()
		}
	}, mptest.WithInitOptions(mp.WithTrace(filepath.Join(dir, "ring"))))
	f, err := trace.ReadFile(filepath.Join(dir, "ring.rank0.json"))
	require.NoError(t, err)
	assert.Equal(t, uint64(6), f.OtherData.Ranks[0].Dropped)
	assert.Equal(t, 4, f.OtherData.Ranks[0].Spans)
	assert.Equal(t, 4, f.OtherData.Ranks[0].Capacity)
	var got []string
	for _, e := range f.TraceEvents {
		if e.Ph == "X" {
			got = append(got, e.Name)
		}
	}
	assert.Equal(t, []string{"step 6", "step 7", "step 8", "step 9"}, got)
}

// TestTracePendingAtAbort: Abort writes what was recorded, the operation
// it stopped marked pending; Close writes it again, complete.
func TestTracePendingAtAbort(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "abort.rank0.json")
	mptest.Run(t, 1, func(t *testing.T, c *mp.Comm) {
		q := mp.Irecv(c, make([]byte, 8), 0, 3) // no message will come
		c.Abort(errors.New("stop"))
		f, err := trace.ReadFile(path)
		require.NoError(t, err)
		irecv := spansOf(f, "Irecv")
		require.Len(t, irecv, 1)
		assert.True(t, irecv[0].Args.Pending)
		_, err = q.Wait()
		require.ErrorIs(t, err, mp.ErrAborted)
	}, mptest.WithInitOptions(mp.WithTrace(filepath.Join(dir, "abort.json"))))
	f, err := trace.ReadFile(path)
	require.NoError(t, err)
	irecv := spansOf(f, "Irecv")
	require.Len(t, irecv, 1)
	assert.False(t, irecv[0].Args.Pending)
	assert.Contains(t, irecv[0].Args.Error, "aborted")
}

// TestTraceUnwritablePath: a trace file that cannot be created fails
// Init at once, saying which.
func TestTraceUnwritablePath(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "no such dir", "t.json")
	job := bootstrap.Job{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Launcher: "single"}
	_, err := mp.Init(t.Context(), mp.WithJob(job), mp.WithEnv(func(string) string { return "" }), mp.WithTrace(spec))
	require.ErrorIs(t, err, mp.ErrInvalid)
	assert.Contains(t, err.Error(), "no such dir")
}

// TestTraceEnv: COURIER_TRACE names the file as WithTrace does, and
// WithTrace("") turns it off.
func TestTraceEnv(t *testing.T) {
	dir := t.TempDir()
	env := func(k string) string {
		if k == "COURIER_TRACE" {
			return filepath.Join(dir, "env.json")
		}
		return ""
	}
	job := bootstrap.Job{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Launcher: "single"}
	c, err := mp.Init(t.Context(), mp.WithJob(job), mp.WithEnv(env), mp.WithBackend("tcp"))
	require.NoError(t, err)
	assert.True(t, c.Tracing())
	require.NoError(t, c.Close())
	_, err = trace.ReadFile(filepath.Join(dir, "env.rank0.json"))
	require.NoError(t, err)

	c, err = mp.Init(t.Context(), mp.WithJob(job), mp.WithEnv(env), mp.WithBackend("tcp"), mp.WithTrace(""))
	require.NoError(t, err)
	assert.False(t, c.Tracing())
	require.NoError(t, c.Close())
}

// TestTraceOffAllocatesNothing: with no trace, a span and a message
// allocate nothing.
func TestTraceOffAllocatesNothing(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	if os.Getenv("COURIER_TRACE") != "" {
		t.Skip("COURIER_TRACE is set: openRanks records a timeline")
	}
	c := openRanks(t, 2, "host")
	require.False(t, c[0].Tracing())
	assert.Zero(t, testing.AllocsPerRun(1000, func() { c[0].Trace("kernel").End() }))

	const runs = 200
	buf0, buf1 := make([]byte, 8), make([]byte, 8)
	done := make(chan error, 1)
	go func() {
		for range runs + 1 { // AllocsPerRun calls f once more, to warm up
			if _, err := mp.Recv(c[1], buf1, 0, 0); err != nil {
				done <- err
				return
			}
			if err := mp.Send(c[1], buf1, 0, 0); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var fail error
	allocs := testing.AllocsPerRun(runs, func() {
		if err := mp.Send(c[0], buf0, 1, 0); err != nil {
			fail = err
		}
		if _, err := mp.Recv(c[0], buf0, 1, 0); err != nil {
			fail = err
		}
	})
	require.NoError(t, fail)
	require.NoError(t, <-done)
	assert.Zero(t, allocs, "allocations per round trip with tracing off")
}

// TestTraceFileNames: the naming rule of COURIER_TRACE.
func TestTraceFileNames(t *testing.T) {
	for spec, want := range map[string]string{
		"trace":             "trace.rank3.json",
		"trace.json":        "trace.rank3.json",
		"/tmp/x/%r.json":    "/tmp/x/3.json",
		"out/job-%r-%r.trc": "out/job-3-3.trc",
		"a.json.json":       "a.json.rank3.json",
	} {
		assert.Equal(t, want, mp.TraceFile(spec, 3), spec)
	}
	assert.True(t, strings.HasSuffix(mp.TraceFile("t", 0), ".rank0.json"))
}

// TestTraceDerived: a communicator made by Dup records into its world's
// file, its spans naming it, and the Dup is a span of the world.
func TestTraceDerived(t *testing.T) {
	dir := t.TempDir()
	mptest.Run(t, 2, func(t *testing.T, c *mp.Comm) {
		d, err := c.Dup()
		require.NoError(t, err)
		defer d.Close()
		require.True(t, d.Tracing())
		if d.Rank() == 0 {
			require.NoError(t, mp.Send(d, []int16{1, 2}, 1, 4))
		} else {
			_, err := mp.Recv(d, make([]int16, 2), 0, 4)
			require.NoError(t, err)
		}
	}, mptest.WithInitOptions(mp.WithTrace(filepath.Join(dir, "d.json"))))
	for rank, op := range []string{"Send", "Recv"} {
		f, err := trace.ReadFile(filepath.Join(dir, "d.rank"+strconv.Itoa(rank)+".json"))
		require.NoError(t, err)
		dup := spansOf(f, "Dup")
		require.Len(t, dup, 1)
		assert.Equal(t, trace.CatColl, dup[0].Cat)
		assert.Empty(t, dup[0].Args.Comm, "the Dup is the world's")
		msg := spansOf(f, op)
		require.Len(t, msg, 1)
		assert.Equal(t, "dup 1 of world", msg[0].Args.Comm)
		assert.Equal(t, int64(4), *msg[0].Args.Bytes)
	}
}
