package engine

import (
	"errors"
	"io"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
)

// memLink is a Link between two engines of this process: frames go, in
// order, through a queue that the link's goroutine hands to the other
// engine's Peer, as a byte transport would.
type memLink struct {
	local, remote *Peer
	q             chan memItem
	quit          chan struct{}
	once          sync.Once
	mu            sync.Mutex
	seq           uint64
	gate          chan struct{} // when set, DATA waits for it to close
}

type memItem struct {
	h       Header
	payload []byte
	job     *Job
}

type memSource struct{ b []byte }

func (s *memSource) ReadFull(dst []byte) error {
	if len(dst) > len(s.b) {
		return io.ErrUnexpectedEOF
	}
	s.b = s.b[copy(dst, s.b):]
	return nil
}

func (s *memSource) Discard(n int) error {
	if n > len(s.b) {
		return io.ErrUnexpectedEOF
	}
	s.b = s.b[n:]
	return nil
}

func (l *memLink) Send(h Header, payload []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	h.Seq = l.seq
	l.seq++
	l.q <- memItem{h: h, payload: append([]byte(nil), payload...)}
	return nil
}

func (l *memLink) Queue(j Job)                { l.q <- memItem{job: &j} }
func (l *memLink) EagerLimit() int64          { return 1 << 12 }
func (l *memLink) Goodbye(deadline time.Time) { l.Queue(Job{Kind: KindBye}) }
func (l *memLink) Kill(aborted bool)          { l.once.Do(func() { close(l.quit) }) }

// run is the link's goroutine: it delivers frames and does the writer's
// jobs, in order.
func (l *memLink) run() {
	deliver := func(h Header, payload []byte) error {
		return l.remote.Arrive(&h, &memSource{b: payload})
	}
	for {
		var it memItem
		select {
		case it = <-l.q:
		case <-l.quit:
			return
		}
		if it.job == nil {
			deliver(it.h, it.payload)
			continue
		}
		switch it.job.Kind {
		case KindCTS, KindLeave:
			deliver(it.job.Frame(), nil)
		case KindData:
			l.local.SendData(*it.job, 1<<14, func(h *Header, payload []byte) error {
				if l.gate != nil {
					<-l.gate
				}
				return deliver(*h, append([]byte(nil), payload...))
			})
		case KindBye:
			deliver(Header{Kind: KindBye}, nil)
			return
		}
	}
}

// mesh makes n engines joined by memLinks; Close runs at the test's end.
func mesh(t *testing.T, n int) ([]*Engine, [][]*memLink) {
	t.Helper()
	es := make([]*Engine, n)
	for i := range es {
		e, err := New(Options{Rank: i, Size: n, Linger: 200 * time.Millisecond})
		require.NoError(t, err)
		es[i] = e
	}
	links := make([][]*memLink, n)
	for i := range links {
		links[i] = make([]*memLink, n)
		for j := range links[i] {
			if i != j {
				links[i][j] = &memLink{q: make(chan memItem, 4096), quit: make(chan struct{})}
			}
		}
	}
	for i := range n {
		for j := range n {
			if i != j {
				links[i][j].local = es[i].Attach(j, links[i][j])
			}
		}
	}
	for i := range n {
		for j := range n {
			if i != j {
				links[i][j].remote = links[j][i].local
				es[i].Go(links[i][j].run)
			}
		}
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, e := range es {
			wg.Add(1)
			go func() { defer wg.Done(); e.Close() }()
		}
		wg.Wait()
	})
	return es, links
}

func buf[E any](s []E, d backend.DType) backend.Buffer {
	b := backend.Buffer{Count: int64(len(s)), Type: d}
	if len(s) > 0 {
		b.Ptr = unsafe.Pointer(unsafe.SliceData(s))
	}
	return b
}

// waiter returns a function that waits for a request straight from
// Isend or Irecv, and releases it: waiter(t)(c.Isend(…)).
func waiter(t *testing.T) func(backend.Request, error) (backend.Status, error) {
	return func(r backend.Request, err error) (backend.Status, error) {
		t.Helper()
		require.NoError(t, err)
		st, err := r.Wait(5 * time.Second)
		r.Release()
		return st, err
	}
}

// derive makes communicator id of members on every engine given.
func derive(t *testing.T, es []*Engine, id uint32, members []int) []backend.Conn {
	t.Helper()
	out := make([]backend.Conn, len(es))
	for _, w := range members {
		c, err := es[w].Split(id, members)
		require.NoError(t, err)
		out[w] = c
	}
	return out
}

// Three communicators over one pair, the same tag on each, eager and
// rendezvous: wildcard receives posted on each take that communicator's
// message only, in the opposite order to the sends, and the statuses name
// the sender by its rank there.
func TestCommsApart(t *testing.T) {
	es, _ := mesh(t, 2)
	a := derive(t, es, 7, []int{0, 1})
	b := derive(t, es, 9, []int{1, 0}) // ranks reversed
	big := make([]int32, 10000)        // over the eager limit
	for i := range big {
		big[i] = int32(i)
	}
	var sends []backend.Request
	for _, s := range []struct {
		c    backend.Conn
		dest int
		v    []int32
	}{{es[0], 1, []int32{1}}, {a[0], 1, []int32{2}}, {b[0], 0, []int32{3}}, {a[0], 1, big}} {
		r, err := s.c.Isend(buf(s.v, backend.Int32), s.dest, 5, 0)
		require.NoError(t, err)
		sends = append(sends, r)
	}
	got := make([]int32, 1)
	st, err := waiter(t)(b[1].(*Comm).Irecv(buf(got, backend.Int32), backend.AnySource, backend.AnyTag, 0))
	require.NoError(t, err)
	assert.Equal(t, []int32{3}, got)
	assert.Equal(t, backend.Status{Source: 1, Tag: 5, Count: 1}, st, "world rank 0 is rank 1 of b")
	gotBig := make([]int32, len(big))
	st, err = waiter(t)(a[1].Irecv(buf(gotBig, backend.Int32), 0, 5, 0))
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Count, "a's first message is the small one")
	assert.Equal(t, int32(2), gotBig[0])
	st, err = waiter(t)(a[1].Irecv(buf(gotBig, backend.Int32), 0, 5, 0))
	require.NoError(t, err)
	assert.Equal(t, big, gotBig)
	assert.Equal(t, int64(len(big)), st.Count)
	st, err = waiter(t)(es[1].Irecv(buf(got, backend.Int32), backend.AnySource, backend.AnyTag, 0))
	require.NoError(t, err)
	assert.Equal(t, []int32{1}, got)
	assert.Equal(t, 0, st.Source)
	for _, r := range sends {
		_, err := waiter(t)(r, nil)
		require.NoError(t, err)
	}
}

// A message, eager or announced, for a communicator the receiver has not
// made yet waits for it, and is received there with the sender's rank in
// it; a LEAVE that comes early is applied when it is made.
func TestEarlyArrival(t *testing.T) {
	es, _ := mesh(t, 3)
	members := []int{2, 0, 1}
	c0, err := es[0].Split(4, members)
	require.NoError(t, err)
	c2, err := es[2].Split(4, members)
	require.NoError(t, err)
	small := []uint16{7, 8}
	big := make([]uint16, 5000)
	big[4999] = 9
	s1, err := c0.Isend(buf(small, backend.Uint16), 2, 1, 0) // to world rank 1
	require.NoError(t, err)
	s2, err := c0.Isend(buf(big, backend.Uint16), 2, 2, 0)
	require.NoError(t, err)
	require.NoError(t, c2.Close()) // world rank 2 leaves before rank 1 has made it
	time.Sleep(20 * time.Millisecond)
	c1, err := es[1].Split(4, members)
	require.NoError(t, err)
	found, st, err := c1.(*Comm).Iprobe(backend.AnySource, backend.AnyTag)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, backend.Status{Source: 1, Tag: 1, Count: 2}, st)
	got := make([]uint16, 2)
	st, err = waiter(t)(c1.Irecv(buf(got, backend.Uint16), 1, 1, 0))
	require.NoError(t, err)
	assert.Equal(t, small, got)
	assert.Equal(t, 1, st.Source)
	gotBig := make([]uint16, len(big))
	_, err = waiter(t)(c1.Irecv(buf(gotBig, backend.Uint16), backend.AnySource, 2, 0))
	require.NoError(t, err)
	assert.Equal(t, big, gotBig)
	_, err = waiter(t)(s1, nil)
	require.NoError(t, err)
	_, err = waiter(t)(s2, nil)
	require.NoError(t, err)
	_, err = c1.Isend(buf(small, backend.Uint16), 0, 1, 0) // rank 0 of it is world rank 2, which left
	require.ErrorIs(t, err, backend.ErrPeerLost)
	require.ErrorIs(t, err, backend.ErrPeerClosed)
	assert.ErrorContains(t, err, "rank 0 closed")
}

// A derived communicator's Close ends its own operations with ErrClosed
// and tells the other member (LEAVE), whose operations with this rank
// there end with ErrPeerLost and ErrPeerClosed at once; the world and
// another derived communicator go on.
func TestLeave(t *testing.T) {
	es, _ := mesh(t, 2)
	c := derive(t, es, 3, []int{1, 0})
	other := derive(t, es, 4, []int{0, 1})
	dst := make([]byte, 8)
	mine, err := c[0].Irecv(buf(dst, backend.Uint8), 0, 1, 0) // from world rank 1
	require.NoError(t, err)
	theirs, err := c[1].Irecv(buf(dst, backend.Uint8), 1, 1, 0) // from world rank 0
	require.NoError(t, err)
	big := make([]byte, 1<<16)
	large, err := c[1].Isend(buf(big, backend.Uint8), 1, 2, 0) // waits for a CTS that never comes
	require.NoError(t, err)
	require.Len(t, c[1].Pending(), 2)
	assert.Empty(t, es[1].Pending(), "the world has no operation of c's")
	require.NoError(t, c[0].Close())
	_, err = mine.Wait(time.Second)
	require.ErrorIs(t, err, backend.ErrClosed)
	mine.Release()
	for _, r := range []backend.Request{theirs, large} {
		_, err = r.Wait(time.Second)
		require.ErrorIs(t, err, backend.ErrPeerLost)
		require.ErrorIs(t, err, backend.ErrPeerClosed)
		assert.ErrorContains(t, err, "rank 1 closed")
		r.Release()
	}
	_, err = c[0].Isend(buf(dst, backend.Uint8), 0, 1, 0)
	require.ErrorIs(t, err, backend.ErrClosed)
	// The world and the other communicator still work.
	for _, cc := range [][]backend.Conn{{es[0], es[1]}, other} {
		r, err := cc[1].Irecv(buf(dst, backend.Uint8), 0, 1, 0)
		require.NoError(t, err)
		_, err = waiter(t)(cc[0].Isend(buf([]byte{5}, backend.Uint8), 1, 1, 0))
		require.NoError(t, err)
		_, err = waiter(t)(r, nil)
		require.NoError(t, err)
	}
	// An id closed here is not made again.
	_, err = es[0].Split(3, []int{0, 1})
	require.ErrorIs(t, err, backend.ErrInvalid)
}

// A receive that asked for a large message's payload (CTS) and is ended
// by its communicator's close leaves the DATA still on the way to be read
// and dropped: the link stays healthy.
func TestCloseDropsOwedData(t *testing.T) {
	es, links := mesh(t, 2)
	c := derive(t, es, 11, []int{0, 1})
	gate := make(chan struct{})
	links[0][1].gate = gate
	big := make([]byte, 1<<16)
	s, err := c[0].Isend(buf(big, backend.Uint8), 1, 0, 0)
	require.NoError(t, err)
	dst := make([]byte, len(big))
	r, err := c[1].Irecv(buf(dst, backend.Uint8), 0, 0, 0)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // the CTS reaches rank 0, whose DATA waits at the gate
	require.NoError(t, c[1].Close())
	_, err = r.Wait(time.Second)
	require.ErrorIs(t, err, backend.ErrClosed)
	r.Release()
	close(gate)
	_, err = s.Wait(5 * time.Second)
	require.NoError(t, err, "the DATA was written")
	s.Release()
	got := make([]byte, 1)
	q, err := es[1].Irecv(buf(got, backend.Uint8), 0, 1, 0)
	require.NoError(t, err)
	_, err = waiter(t)(es[0].Isend(buf([]byte{42}, backend.Uint8), 1, 1, 0))
	require.NoError(t, err)
	_, err = waiter(t)(q, nil)
	require.NoError(t, err, "the world's link after DATA for a closed communicator")
	assert.Equal(t, byte(42), got[0])
	assert.Nil(t, es[1].world.peer(0).Down())
}

// A lost peer fails the operations with it in every communicator; a
// derived one names it by its rank there, and the job's rank.
func TestPeerLostInComm(t *testing.T) {
	es, _ := mesh(t, 3)
	c := derive(t, es, 2, []int{2, 1, 0})
	dst := make([]byte, 1)
	inC, err := c[0].Irecv(buf(dst, backend.Uint8), 0, 1, 0) // from world rank 2
	require.NoError(t, err)
	inWorld, err := es[0].Irecv(buf(dst, backend.Uint8), 2, 1, 0)
	require.NoError(t, err)
	es[0].world.peer(2).Broken(io.EOF)
	_, err = waiter(t)(inC, nil)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.ErrorContains(t, err, "rank 0 of this communicator (rank 2 of the job)")
	_, err = waiter(t)(inWorld, nil)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.NotContains(t, err.Error(), "of this communicator")
	_, err = c[0].Isend(buf(dst, backend.Uint8), 0, 1, 0)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	// Rank 1 of c is world rank 1, still there.
	r, err := c[1].Irecv(buf(dst, backend.Uint8), 2, 1, 0)
	require.NoError(t, err)
	_, err = waiter(t)(c[0].Isend(buf([]byte{1}, backend.Uint8), 1, 1, 0))
	require.NoError(t, err)
	_, err = waiter(t)(r, nil)
	require.NoError(t, err)
}

// Split refuses what cannot be a communicator.
func TestSplitValidates(t *testing.T) {
	es, _ := mesh(t, 3)
	for _, c := range []struct {
		id      uint32
		members []int
	}{
		{0, []int{0, 1}},    // the world's id
		{5, []int{0, 3}},    // a rank out of range
		{5, []int{0, 0, 1}}, // twice
		{5, []int{1, 2}},    // without this rank
		{5, nil},
	} {
		_, err := es[0].Split(c.id, c.members)
		assert.ErrorIs(t, err, backend.ErrInvalid, "Split(%d, %v)", c.id, c.members)
	}
	d, err := es[0].Split(5, []int{2, 0})
	require.NoError(t, err)
	_, err = es[0].Split(5, []int{0, 1})
	assert.ErrorIs(t, err, backend.ErrInvalid, "an id in use")
	// A split of a split takes ranks of the split.
	dd, err := d.(backend.Splitter).Split(6, []int{1})
	require.NoError(t, err)
	assert.Equal(t, 0, dd.(*Comm).Rank())
	assert.Equal(t, "self", dd.(*Comm).Transport(0))
	got := make([]int8, 1)
	_, err = waiter(t)(dd.Isend(buf([]int8{3}, backend.Int8), 0, 0, 0))
	require.NoError(t, err)
	_, err = waiter(t)(dd.Irecv(buf(got, backend.Int8), 0, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, int8(3), got[0])
	// Closing the world ends the derived ones.
	q, err := d.Irecv(buf(got, backend.Int8), 0, 0, 0)
	require.NoError(t, err)
	require.NoError(t, es[0].Close())
	_, err = q.Wait(time.Second)
	require.ErrorIs(t, err, backend.ErrClosed)
	q.Release()
	_, err = dd.Isend(buf([]int8{3}, backend.Int8), 0, 0, 0)
	require.ErrorIs(t, err, backend.ErrClosed)
	require.NoError(t, dd.Close())
	require.NoError(t, d.Close())
	assert.False(t, errors.Is(err, backend.ErrPeerLost))
}

// Send takes a message up to the eager limit whole, with no request, on
// the world and on a derived communicator; it leaves larger messages,
// device buffers and sends to this rank to Isend (handled false, nothing
// sent); a message sent with it never overtakes one started before it
// with Isend, nor the other way; a revoked communicator's Send fails.
func TestSendWithoutRequest(t *testing.T) {
	es, links := mesh(t, 2)
	d := derive(t, es, 3, []int{1, 0})
	big := make([]byte, 3*es[0].world.peer(1).eager)
	big[len(big)-1] = 42

	sent := func() uint64 { links[0][1].mu.Lock(); defer links[0][1].mu.Unlock(); return links[0][1].seq }
	before := sent()
	for _, b := range []backend.Buffer{buf(big, backend.Uint8), {Mem: backend.Device, Count: 1, Type: backend.Uint8}} {
		handled, err := es[0].Send(b, 1, 1, 0)
		assert.False(t, handled)
		assert.NoError(t, err)
	}
	handled, err := es[0].Send(buf([]byte{1}, backend.Uint8), 0, 1, 0)
	assert.False(t, handled, "to this rank")
	assert.NoError(t, err)
	assert.Equal(t, before, sent(), "nothing sent")

	// small (Send), large (Isend), small (Send), on one tag: in order.
	handled, err = es[0].Send(buf([]byte{1}, backend.Uint8), 1, 5, 0)
	require.True(t, handled)
	require.NoError(t, err)
	large, err := es[0].Isend(buf(big, backend.Uint8), 1, 5, 0)
	require.NoError(t, err)
	handled, err = es[0].Send(buf([]byte{2}, backend.Uint8), 1, 5, 0)
	require.True(t, handled)
	require.NoError(t, err)
	handled, err = d[0].(backend.Sender).Send(buf([]byte{3}, backend.Uint8), 0, 5, 0)
	require.True(t, handled, "a derived communicator's")
	require.NoError(t, err)

	got := make([]byte, len(big))
	for _, want := range []struct {
		n    int64
		last byte
	}{{1, 1}, {int64(len(big)), 42}, {1, 2}} {
		st, err := waiter(t)(es[1].Irecv(buf(got, backend.Uint8), 0, 5, 0))
		require.NoError(t, err)
		assert.Equal(t, want.n, st.Count)
		assert.Equal(t, want.last, got[st.Count-1])
	}
	_, err = waiter(t)(large, nil)
	require.NoError(t, err)
	st, err := waiter(t)(d[1].Irecv(buf(got, backend.Uint8), 1, 5, 0))
	require.NoError(t, err)
	assert.Equal(t, backend.Status{Source: 1, Tag: 5, Count: 1}, st)
	assert.Equal(t, byte(3), got[0])

	es[0].world.Revoke(1)
	handled, err = es[0].Send(buf([]byte{1}, backend.Uint8), 1, 5, 0)
	assert.True(t, handled)
	assert.Error(t, err, "a revoked communicator")
}

// TestPulledSend: a link finds the payload of a large send in flight to
// its peer by the send's id (for a split copy, CTSHelp), and nothing for
// an id that is not one; a CTSHelp that reaches the engine (a link that
// does not split copies passed it up) is a frame error, and the send
// goes on.
func TestPulledSend(t *testing.T) {
	es, links := mesh(t, 2)
	buf := make([]byte, 1<<14) // over memLink's eager limit: a rendezvous
	for i := range buf {
		buf[i] = byte(i)
	}
	s, err := es[0].Isend(backend.Buffer{Ptr: unsafe.Pointer(&buf[0]), Count: int64(len(buf)), Type: backend.Uint8}, 1, 5, 0)
	require.NoError(t, err)
	sid := s.(*request).id
	p := links[0][1].local

	got, ok := p.PulledSend(sid)
	require.True(t, ok, "the send is in flight to rank 1")
	assert.Equal(t, unsafe.SliceData(buf), unsafe.SliceData(got), "the send's own buffer")
	assert.Len(t, got, len(buf))
	_, ok = p.PulledSend(sid + 1000)
	assert.False(t, ok, "no send of that id")
	_, ok = links[1][0].local.PulledSend(sid)
	assert.False(t, ok, "rank 1's peer 0 holds no send of rank 1 with that id")

	err = p.Arrive(&Header{Kind: KindCTS, Flags: CTSHelp, SID: sid}, &memSource{})
	assert.ErrorIs(t, err, ErrFrame)
	done, _, _ := s.Test()
	assert.False(t, done, "a refused CTSHelp leaves the send in flight")

	recv := make([]byte, len(buf))
	r, err := es[1].Irecv(backend.Buffer{Ptr: unsafe.Pointer(&recv[0]), Count: int64(len(recv)), Type: backend.Uint8}, 0, 5, 0)
	require.NoError(t, err)
	_, err = r.Wait(5 * time.Second)
	require.NoError(t, err)
	_, err = s.Wait(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, buf, recv)
	_, ok = p.PulledSend(sid)
	assert.False(t, ok, "a send that ended is not in flight")
}
