package nccl

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// stageAlign is the alignment of each operation's region in staging
// memory.
const stageAlign = 256

// flagStride is the distance, in 8-byte words, between the completion
// words of two channels: a cache line each.
const flagStride = 8

// minSlab is the smallest staging slab allocated.
const minSlab = 1 << 20

// device is the real engine: one GPU, an NCCL communicator of two ranks
// and a CUDA stream per channel, a stream per other rank that its two
// channels share when they can (see pick), and the memory that stages
// host buffers.
//
// Device buffers go to NCCL as they are (zero copy). A host buffer is
// staged: a send's bytes are copied by the CPU into page-locked memory at
// launch and by the GPU into device staging memory, on the stream before
// the group; a receive lands in device staging memory, is copied by the
// GPU into page-locked memory on the stream after the group, and by the CPU
// into the user's slice when the group has finished (finish). Staging
// memory comes in slabs, one per group, kept for reuse and freed only by
// close (freeing device memory may wait for the device to be idle, which a
// pending receive prevents).
type device struct {
	lib     *library
	hooks   *devHooks
	dev     cuda.Device
	rank    int            // this rank
	size    int            // ranks in the job
	comms   []uintptr      // by channel; 0 for none (this rank's own), and once aborted or destroyed
	streams []*cuda.Stream // by channel
	ops     cOps           // reused by every launch

	// The pair's shared stream (see pick): by peer rank, shared is the
	// stream (nil: none, each channel keeps to its own) and sharedLive
	// the number of groups on it not finished yet (all of one channel).
	// By channel: live, its groups launched and not finished; cur, the
	// stream of the last one launched; pinned, that follow ordered the
	// channel's own stream after a caller's stream, so that the next
	// launch must go there.
	shared     []*cuda.Stream
	sharedLive []int
	live       []int
	cur        []*cuda.Stream
	pinned     []bool

	events, allEvents []*cuda.Event        // free, and all made
	slabs, allSlabs   []*slab              // free, and all made
	staged            []*staged            // free per-group records
	temps             map[int64][]*tempMem // free temporary memory, by size
	allTemps          []cuda.Slice[byte]
	warm              cuda.Slice[byte] // 2N bytes: the connection buffers, then empty messages' tokens
	stuck             atomic.Bool      // an abort did not return within abortBound
	// blocking: the communicators are blocking ones (the default; see
	// BlockingEnv): a launch returns once the group is on the stream, and
	// first contact is made by connectBlocking.
	blocking bool
	// timed: launches measure the time NCCL's calls take (group.nccl), for
	// COURIER_NCCL_TRACE.
	timed bool

	// Completion words (see useFlags): when flags is set, each channel has
	// a word of page-locked memory, at flagStride words from the next,
	// that its stream sets to a group's number once the group is done; seq
	// is the number of the channel's last group. Without them, each group
	// records an event that poll queries.
	flags    []uint64
	flagMem  cuda.Pinned[uint64]
	flagAddr uintptr // the device address of flagMem
	seq      []uint64
	after    after // launch's seal, reused (handed to C)
	waitedOn bool  // a stream was made to wait on a completion word (waitOn)
}

// useFlags sets up completion words for n channels, unless the driver
// cannot write them from a stream (then the engine stays with events and
// useFlags says why). Polling a word in host memory costs the CPU a load;
// querying an event is a driver call (about 1.5 µs on an H200, measured
// with BenchmarkGPUPrimitives), which is most of a small message's
// time on the critical path. It checks that a write from a stream reaches
// the CPU before relying on it.
func (d *device) useFlags(n int, probe *cuda.Stream) error {
	mem, err := cuda.HostAlloc[uint64](int64(n+1) * flagStride)
	if err != nil {
		return err
	}
	addr, err := mem.DevicePtr()
	if err == nil {
		w := mem.Slice()
		clear(w)
		last := n * flagStride
		if err = probe.WriteValue64(addr+uintptr(8*last), 1); err == nil {
			err = probe.Synchronize()
		}
		if err == nil && atomic.LoadUint64(&w[last]) != 1 {
			err = errors.New("a value written from a stream did not reach host memory")
		}
	}
	if err != nil {
		mem.Free()
		return err
	}
	d.flagMem, d.flagAddr, d.flags, d.seq = mem, addr, mem.Slice(), make([]uint64, n)
	return nil
}

// flagOf returns the device address of channel ch's completion word.
func (d *device) flagOf(ch int) uintptr { return d.flagAddr + uintptr(8*ch*flagStride) }

// connectBlocking makes the first contact on every channel of blocking
// communicators: a one-byte send to each other rank and a one-byte
// receive from each, all in one NCCL group over every channel (NCCL
// connects the communicators of a group at once; the call returns only
// once every peer has posted its side), then waits for every channel's
// stream. The group runs on a goroutine of its own so that ctx bounds it;
// if ctx ends first, the call is left to finish or not (a blocking call
// cannot be aborted) and the error says so.
func (d *device) connectBlocking(ctx context.Context, rank, size int) error {
	var ops cOps
	base := d.warm.Ptr()
	for p := range size {
		if p == rank {
			continue
		}
		ops.add(d.comms[sendChan(p)], d.streams[sendChan(p)].Handle(), base, 1, channelPeer(sendChan(p)), ncclUint8, false)
		ops.add(d.comms[recvChan(p)], d.streams[recvChan(p)].Handle(), base+uintptr(1+p), 1, channelPeer(recvChan(p)), ncclUint8, true)
	}
	if len(ops) == 0 {
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		_, _, err := d.lib.group(d.hooks, ops, false)
		for _, s := range d.streams {
			if err == nil && s != nil {
				err = waitStream(ctx, s)
			}
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("nccl: connecting the ranks (a one-byte message on every channel): %w", err)
		}
		return nil
	case <-ctx.Done():
		d.stuck.Store(true)
		return fmt.Errorf("nccl: connecting the ranks (a one-byte message on every channel) did not finish: did every rank reach Init? %w", ctx.Err())
	}
}

// drain waits for stream s to finish its work, at most abortBound (after
// every channel was aborted, nothing on it should be waiting for a peer).
func (d *device) drain(s *cuda.Stream) error {
	ctx, cancel := context.WithTimeout(context.Background(), abortBound)
	defer cancel()
	err := waitStream(ctx, s)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		d.stuck.Store(true)
		return fmt.Errorf("nccl: a channel's stream was still busy %v after its communicator was aborted; it was left as it is", abortBound)
	case err != nil:
		return fmt.Errorf("nccl: waiting for a channel's stream after its abort: %w", err)
	}
	return nil
}

// waitStream polls stream s, backing off from 1 µs to 1 ms between
// polls, until its work is done (nil), the query fails, or ctx ends (its
// error).
func waitStream(ctx context.Context, s *cuda.Stream) error {
	for delay := time.Microsecond; ; delay = min(2*delay, time.Millisecond) {
		done, err := s.Query()
		if err != nil || done {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(delay)
	}
}

// slab is staging memory: device memory and as much page-locked host
// memory.
type slab struct {
	dev  cuda.Slice[byte]
	host cuda.Pinned[byte]
}

func (s *slab) size() int64 { return s.dev.Len() }

// staged is the device engine's record of a group: the stream it went
// on, its number on its channel (with completion words) or its event
// (without), its slab and the receives to copy out of the slab when it is
// done.
type staged struct {
	stream   *cuda.Stream
	onShared bool
	seq      uint64
	ev       *cuda.Event
	slab     *slab
	backs    []copyBack
}

// setShared gives the engine a shared stream for each other rank of a job
// of size ranks (nil entries: none for that rank).
func (d *device) setShared(shared []*cuda.Stream) {
	n := len(d.streams)
	d.shared, d.sharedLive = shared, make([]int, len(shared))
	d.live, d.cur, d.pinned = make([]int, n), make([]*cuda.Stream, n), make([]bool, n)
}

// pick returns the stream channel ch's next group goes on, and whether it
// is the pair's shared stream.
//
// Each channel (a direction between two ranks, an NCCL communicator) has
// a stream of its own, so that a group waiting on the GPU for its peer
// never holds up the other direction: a receive posted first and a send
// posted next, on each of two ranks, must not wait for each other. But a
// message that alternates direction (a ping-pong) is faster when both
// directions use one stream: on 2 H200s the C program measured 0.2–1.8 µs
// per message more with a stream per direction than with one
// (scripts/gpu-waits.sh). So the two channels of a pair also share a
// stream, used only where it cannot make one group wait for another:
//
//   - a channel that follow pinned goes on its own stream (follow made
//     that stream wait for the channel's unfinished groups elsewhere);
//   - else a channel with groups not finished goes on where its last one
//     went (its groups finish in order: the completion word only grows);
//   - else on the shared stream if no group on it is unfinished, else on
//     its own.
//
// So the shared stream holds unfinished groups of at most one channel,
// and nothing ever waits there behind another channel's work.
func (d *device) pick(ch int) (*cuda.Stream, bool) {
	own := d.streams[ch]
	if d.shared == nil || ch == worldChan(d.size) {
		return own, false
	}
	sh := d.shared[chanPeer(ch)]
	switch {
	case d.pinned[ch]:
		return own, false
	case d.live[ch] > 0:
		return d.cur[ch], d.cur[ch] == sh && sh != nil
	case sh != nil && d.sharedLive[chanPeer(ch)] == 0:
		return sh, true
	}
	return own, false
}

// launched records that a group of channel ch went on stream s.
func (d *device) launched(ch int, st *staged, s *cuda.Stream, onShared bool) {
	st.stream, st.onShared = s, onShared
	if d.shared == nil {
		return
	}
	d.live[ch]++
	d.cur[ch] = s
	d.pinned[ch] = false
	if onShared {
		d.sharedLive[chanPeer(ch)]++
	}
}

// finished records that a group of channel ch, launched on st.stream, is
// done (seen done: release alone, for a group taken off the GPU by a
// failure, leaves it counted, so that nothing is ever queued behind it).
func (d *device) finished(ch int, st *staged) {
	if d.shared == nil || st.stream == nil {
		return
	}
	d.live[ch]--
	if st.onShared {
		d.sharedLive[chanPeer(ch)]--
	}
}

// curStream is the stream of channel ch's last group (its own before any).
func (d *device) curStream(ch int) *cuda.Stream {
	if d.cur != nil && d.cur[ch] != nil {
		return d.cur[ch]
	}
	return d.streams[ch]
}

// copyBack is a staged receive: n bytes at off in the slab go to dst.
type copyBack struct {
	off, n int64
	dst    unsafe.Pointer
}

func alignUp(n int64) int64 { return (n + stageAlign - 1) &^ (stageAlign - 1) }

// launch implements engine.
func (d *device) launch(g *group) (bool, error) {
	var need int64
	for i := range g.ops {
		o := &g.ops[i]
		switch {
		case o.coll != 0:
			need += collStaging(o)
		case o.addr == 0 && !o.token && (o.scratch || o.buf.Mem == backend.Host):
			need += alignUp(o.bytes())
		}
	}
	st := d.getStaged()
	g.res = st
	if need > 0 {
		s, err := d.getSlab(need)
		if err != nil {
			return false, err
		}
		st.slab = s
	}
	d.ops = d.ops[:0]
	comm := d.comms[g.ch]
	if comm == 0 {
		return false, fmt.Errorf("nccl: internal error: no communicator for channel %d", g.ch)
	}
	s, onShared := d.pick(g.ch)
	d.launched(g.ch, st, s, onShared)
	stream := s.Handle()
	var off int64
	for i := range g.ops {
		o := &g.ops[i]
		if o.coll != 0 {
			if err := d.addColl(o, st, &off, comm, s); err != nil {
				return false, err
			}
			continue
		}
		n := o.bytes()
		typ, count, err := wireType(o.typ, o.count)
		if err != nil {
			return false, err
		}
		var ptr uintptr
		switch {
		case o.addr != 0:
			ptr = o.addr
		case o.token:
			// The connection buffers: byte 0 is sent, byte 1+p receives
			// from rank p.
			ptr = d.warm.Ptr()
			if o.recv {
				ptr += uintptr(1 + o.peer)
			}
		case o.scratch:
			ptr = st.slab.dev.Ptr() + uintptr(off)
			typ, count = ncclUint8, uint64(n)
			off += alignUp(n)
		case o.buf.Mem == backend.Device:
			ptr = uintptr(o.buf.Ptr)
		default:
			ptr = st.slab.dev.Ptr() + uintptr(off)
			if o.recv {
				st.backs = append(st.backs, copyBack{off: off, n: n, dst: o.buf.Ptr})
			} else {
				pin := st.slab.host.Slice()[off : off+n]
				copy(pin, unsafe.Slice((*byte)(o.buf.Ptr), n))
				dst, err := st.slab.dev.Sub(off, off+n)
				if err == nil {
					err = cuda.CopyToDeviceAsync(dst, pin, s)
				}
				if err != nil {
					return false, fmt.Errorf("nccl: staging a send of %d bytes to rank %d: %w", n, o.peer, err)
				}
			}
			off += alignUp(n)
		}
		d.ops.add(comm, stream, ptr, count, channelPeer(g.ch), typ, o.recv)
	}
	// With nothing to queue between the group and its seal (no staged
	// receive to copy back), the seal goes in the same C call: one cgo
	// call and one context switch fewer per operation.
	var then *after
	var ev *cuda.Event
	if len(st.backs) == 0 {
		if d.flags != nil {
			d.after = afterWrite(stream, d.flagOf(g.ch), d.seq[g.ch]+1)
		} else {
			var err error
			if ev, err = d.getEvent(); err != nil {
				return false, err
			}
			d.after = afterRecord(stream, ev.Handle())
		}
		then = &d.after
	}
	ops := d.ops
	inProgress, nccl, sealed, err := d.lib.groupThen(d.hooks, ops, d.timed, then)
	g.nccl += nccl
	switch {
	case sealed && d.flags != nil:
		d.seq[g.ch]++
		st.seq = d.seq[g.ch]
	case sealed:
		st.ev = ev
	case ev != nil:
		d.events = append(d.events, ev)
	}
	return inProgress, err
}

// collStaging is the staging memory collective o needs: its host
// buffers (a Bcast's one buffer once), or, for an Alltoall in place in
// device memory, a copy of the send buffer (a rank's receives must not
// overwrite what it has yet to send).
func collStaging(o *op) int64 {
	switch {
	case o.buf.Mem == backend.Host && o.coll == backend.Bcast:
		return alignUp(o.buf.Len())
	case o.buf.Mem == backend.Host:
		return alignUp(o.buf.Len()) + alignUp(o.buf2.Len())
	case o.coll == backend.Alltoall && o.buf.Count > 0 && o.buf.Ptr == o.buf2.Ptr:
		return alignUp(o.buf.Len())
	}
	return 0
}

// addColl adds collective o to the launch on communicator comm (the
// channel of all ranks) and stream s: host buffers are staged through the
// group's slab from *off on (the send buffer copied in before, the receive
// buffer copied back after), device buffers go as they are. An Alltoall is
// a send and a receive with every rank.
func (d *device) addColl(o *op, st *staged, off *int64, comm uintptr, s *cuda.Stream) error {
	// in copies buffer b into the slab (from the host, or, with fromDev,
	// from the device) and returns its address there.
	in := func(b backend.Buffer, fromDev bool) (uintptr, error) {
		n := b.Len()
		ptr := st.slab.dev.Ptr() + uintptr(*off)
		dst, err := st.slab.dev.Sub(*off, *off+n)
		if err == nil && fromDev {
			err = cuda.CopyDeviceAsync(dst, cuda.ByteView(uintptr(b.Ptr), n, d.dev), s)
		} else if err == nil {
			pin := st.slab.host.Slice()[*off : *off+n]
			copy(pin, b.Bytes())
			err = cuda.CopyToDeviceAsync(dst, pin, s)
		}
		if err != nil {
			return 0, fmt.Errorf("nccl: staging the %v's %d bytes: %w", o.coll, n, err)
		}
		*off += alignUp(n)
		return ptr, nil
	}
	send, recv := uintptr(o.buf.Ptr), uintptr(o.buf2.Ptr)
	var err error
	switch {
	case o.buf.Mem == backend.Host && o.buf.Count > 0:
		at := *off
		if send, err = in(o.buf, false); err != nil {
			return err
		}
		if o.coll == backend.Bcast {
			recv = send
			st.backs = append(st.backs, copyBack{off: at, n: o.buf.Len(), dst: o.buf.Ptr})
		} else if n := o.buf2.Len(); n > 0 {
			recv = st.slab.dev.Ptr() + uintptr(*off)
			st.backs = append(st.backs, copyBack{off: *off, n: n, dst: o.buf2.Ptr})
			*off += alignUp(n)
		}
	case o.coll == backend.Alltoall && o.buf.Count > 0 && o.buf.Ptr == o.buf2.Ptr:
		if send, err = in(o.buf, true); err != nil {
			return err
		}
	}
	if o.buf2.Count == 0 {
		recv = send // a non-root's Reduce: NCCL does not write it
	}
	stream := s.Handle()
	if o.coll == backend.Alltoall {
		n := o.count / int64(d.size)
		typ, count, err := wireType(o.typ, n)
		if err != nil {
			return err
		}
		// This rank's own block too is a send and a receive: NCCL moves
		// it inside the group's kernel, beside the others. (A copy on the
		// stream before the group was measured slower on 2 H200s: 0.90 ×
		// the bus bandwidth of C at 32-512 MiB, +5 µs at 8 B.)
		block := uintptr(n * int64(o.typ.Size()))
		for p := range d.size {
			d.ops.add(comm, stream, send+uintptr(p)*block, count, p, typ, false)
			d.ops.add(comm, stream, recv+uintptr(p)*block, count, p, typ, true)
		}
		return nil
	}
	n := o.count
	if o.coll == backend.ReduceScatter {
		n = o.buf2.Count
	}
	typ, count, ok := collType(o.typ, n, o.coll.Reduces(), o.redop)
	if !ok {
		return fmt.Errorf("nccl: internal error: NCCL has no %v of %v", o.redop, o.typ)
	}
	d.ops.addColl(comm, stream, o.coll, send, recv, count, typ, ncclOps[o.redop], o.root)
	return nil
}

// warmWorld connects the communicator of every rank: an Allreduce of one
// byte of the engine's own memory (the connection buffers' byte for this
// rank, which no message uses) on its stream, waited for until done or
// quit is closed. It runs on a goroutine of its own (conn.startWarm), while
// the communicator issues nothing on that channel, and touches nothing
// else of the engine: its own op list, that communicator and its stream.
//
// worldWarmer is called with the communicator's mutex held: it takes what
// warmWorld needs then, so that the goroutine reads nothing the engine
// may change (detach).
func (d *device) worldWarmer() func(quit <-chan struct{}) error {
	ch := worldChan(d.size)
	comm, s := d.comms[ch], d.streams[ch]
	addr := d.warm.Ptr() + uintptr(1+d.rank)
	return func(quit <-chan struct{}) error {
		if comm == 0 {
			return backend.ErrClosed
		}
		return d.warmWorld(comm, s, addr, quit)
	}
}

func (d *device) warmWorld(comm uintptr, s *cuda.Stream, addr uintptr, quit <-chan struct{}) error {
	var ops cOps
	ops.addColl(comm, s.Handle(), backend.Allreduce, addr, addr, 1, ncclUint8, ncclOps[backend.Sum], 0)
	inProgress, _, err := d.lib.group(d.hooks, ops, false)
	for delay := time.Microsecond; err == nil; delay = min(2*delay, time.Millisecond) {
		if inProgress { // a non-blocking communicator: on the stream once NCCL says so
			inProgress, err = d.lib.asyncState(comm)
		} else {
			var done bool
			if done, err = s.Query(); done {
				return err
			}
		}
		select {
		case <-quit:
			return backend.ErrClosed
		case <-time.After(delay):
		}
	}
	return err
}

// channelPeer is the NCCL rank of the other end of channel ch: on the
// channel to a rank this rank is NCCL rank 0 and the peer rank 1; on the
// channel from it, the other way round (see initComms).
func channelPeer(ch int) int {
	if ch == recvChan(chanPeer(ch)) {
		return 0
	}
	return 1
}

// settle implements engine.
//
// With completion words it also queries the channel's stream: a fault on
// the GPU (the context's sticky error) stops the stream before the word is
// written, and polling the word would never end; the query returns the
// error, and the channel fails with it.
func (d *device) settle(ch int) (bool, error) {
	if d.comms[ch] == 0 {
		return false, nil
	}
	inProgress, err := d.lib.asyncState(d.comms[ch])
	if err == nil && d.flags != nil {
		if _, qerr := d.curStream(ch).Query(); qerr != nil {
			err = fmt.Errorf("nccl: the channel's stream failed: %w", qerr)
		}
	}
	return inProgress, err
}

// seal implements engine: the copies of staged receives, then the write of
// the group's number to the channel's completion word (or the event).
func (d *device) seal(g *group) error {
	st := g.res.(*staged)
	if st.seq != 0 || st.ev != nil {
		return nil // sealed by launch
	}
	for _, b := range st.backs {
		src, err := st.slab.dev.Sub(b.off, b.off+b.n)
		if err == nil {
			err = cuda.CopyToHostAsync(st.slab.host.Slice()[b.off:b.off+b.n], src, st.stream)
		}
		if err != nil {
			return fmt.Errorf("nccl: copying a staged receive of %d bytes back: %w", b.n, err)
		}
	}
	if d.flags != nil {
		d.seq[g.ch]++
		st.seq = d.seq[g.ch]
		if err := st.stream.WriteValue64(d.flagOf(g.ch), st.seq); err != nil {
			return fmt.Errorf("nccl: queueing the completion word's write after a group: %w", err)
		}
		return nil
	}
	ev, err := d.getEvent()
	if err != nil {
		return err
	}
	st.ev = ev
	if err := ev.Record(st.stream); err != nil {
		return fmt.Errorf("nccl: recording the event after a group: %w", err)
	}
	return nil
}

// poll implements engine.
func (d *device) poll(g *group) (bool, error) {
	st := g.res.(*staged)
	if d.flags != nil {
		return atomic.LoadUint64(&d.flags[g.ch*flagStride]) >= st.seq, nil
	}
	done, err := st.ev.Query()
	if err != nil {
		return false, fmt.Errorf("nccl: a group of %d operations failed on the GPU: %w", len(g.ops), err)
	}
	return done, nil
}

// finish implements engine: staged receives reach the user's slices.
func (d *device) finish(g *group) {
	st := g.res.(*staged)
	d.finished(g.ch, st)
	for _, b := range st.backs {
		copy(unsafe.Slice((*byte)(b.dst), b.n), st.slab.host.Slice()[b.off:b.off+b.n])
	}
	d.release(g)
}

// release implements engine.
func (d *device) release(g *group) {
	st, _ := g.res.(*staged)
	g.res = nil
	if st == nil {
		return
	}
	if st.ev != nil {
		d.events = append(d.events, st.ev)
	}
	if st.slab != nil {
		d.slabs = append(d.slabs, st.slab)
	}
	clear(st.backs)
	st.stream, st.onShared = nil, false
	st.seq, st.ev, st.slab, st.backs = 0, nil, nil, st.backs[:0]
	d.staged = append(d.staged, st)
}

// waitOn implements engine.
func (d *device) waitOn(g *group, s *cuda.Stream) error {
	st := g.res.(*staged)
	if d.flags != nil {
		d.waitedOn = true
		return s.WaitValue64(d.flagOf(g.ch), st.seq)
	}
	return s.WaitEvent(st.ev)
}

// follow implements engine: an event recorded on s, waited for by the
// channel's own stream, to which the channel's next group is pinned (the
// wait takes the event as recorded, so the event goes straight back to
// the free list). If the channel's unfinished groups are on the shared
// stream, the own stream also waits for them, so that its groups still
// finish in order.
func (d *device) follow(ch int, s *cuda.Stream) error {
	own := d.streams[ch]
	if cur, onShared := d.pick(ch); onShared && d.live[ch] > 0 {
		if err := d.order(own, cur); err != nil {
			return fmt.Errorf("nccl: ordering a channel's stream after the shared one: %w", err)
		}
	}
	if err := d.order(own, s); err != nil {
		return fmt.Errorf("nccl: ordering a channel after the caller's stream: %w", err)
	}
	if d.pinned != nil {
		d.pinned[ch] = true
	}
	return nil
}

// order makes stream later wait for what is queued on stream first now.
func (d *device) order(later, first *cuda.Stream) error {
	ev, err := d.getEvent()
	if err != nil {
		return err
	}
	defer func() { d.events = append(d.events, ev) }()
	if err := ev.Record(first); err != nil {
		return err
	}
	return later.WaitEvent(ev)
}

// copyBytes implements engine.
func (d *device) copyBytes(dst, src unsafe.Pointer, n int64) error {
	return d.hooks.copyBytes(dst, src, n)
}

// allocTemp implements engine: device memory in power-of-two sizes (at
// least stageAlign), kept for reuse until close.
func (d *device) allocTemp(n int64) (*tempMem, error) {
	size := int64(stageAlign)
	if n > size {
		size = int64(1) << bits.Len64(uint64(n-1))
	}
	if l := d.temps[size]; len(l) > 0 {
		t := l[len(l)-1]
		d.temps[size] = l[:len(l)-1]
		return t, nil
	}
	m, err := cuda.Alloc[byte](d.dev, size)
	if err != nil {
		return nil, fmt.Errorf("nccl: allocating %d bytes of device memory for a message no receive has matched yet: %w", size, err)
	}
	d.allTemps = append(d.allTemps, m)
	return &tempMem{addr: m.Ptr(), res: size}, nil
}

// copyTemp implements engine.
func (d *device) copyTemp(dst backend.Buffer, t *tempMem, n int64) error {
	return d.hooks.copyFrom(dst.Ptr, t.addr, n)
}

// freeTemp implements engine.
func (d *device) freeTemp(t *tempMem) {
	if d.temps == nil {
		d.temps = make(map[int64][]*tempMem)
	}
	size := t.res.(int64)
	d.temps[size] = append(d.temps[size], t)
}

// detach implements engine.
func (d *device) detach(ch int) func() error {
	comm := d.comms[ch]
	if comm == 0 {
		return nil
	}
	d.comms[ch] = 0
	return func() error { return d.abortComm(comm) }
}

// abortComm calls ncclCommAbort on comm, on a goroutine of its own, and
// waits for it at most abortBound. If it has not returned by then, the
// engine is marked stuck (close leaves the memory the GPU may still use)
// and the error matches errAbortStuck; the call goes on in the background.
func (d *device) abortComm(comm uintptr) error {
	done := make(chan error, 1)
	go func() { done <- d.lib.abort(d.hooks, comm) }()
	t := time.NewTimer(abortBound)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		d.stuck.Store(true)
		return fmt.Errorf("%w (waited %v; the GPU may still use the communicator's buffers, which are left allocated)", errAbortStuck, abortBound)
	}
}

// joinAbort reports err, and the abort's error if it failed too.
func joinAbort(err, aerr error) error {
	if aerr != nil {
		return fmt.Errorf("%w (ncclCommAbort: %v)", err, aerr)
	}
	return err
}

// close implements engine: every channel left is aborted, in parallel
// (each abort is one C call on a thread of its own; they are independent
// communicators).
func (d *device) close() error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for ch, comm := range d.comms {
		if comm == 0 {
			continue
		}
		d.comms[ch] = 0
		wg.Go(func() {
			if err := d.abortComm(comm); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if d.stuck.Load() {
		// An abort has not returned: a kernel may still run and use the
		// streams and memory. Waiting for them could hang; freeing them
		// could corrupt what the kernel writes. Leave them.
		errs = append(errs, errors.New("nccl: an ncclCommAbort did not return: the communicator's streams and device memory were left as they are"))
		return errors.Join(errs...)
	}
	drained := true
	for i, s := range slices.Concat(d.streams, d.shared) {
		if s != nil {
			if err := d.drain(s); err != nil {
				what := "the stream shared with rank " + strconv.Itoa(i-len(d.streams))
				if i < len(d.streams) {
					what = "the stream of " + chanName(i, d.size)
				}
				errs = append(errs, fmt.Errorf("%s: %w", what, err))
				drained = false
				continue // a stream still busy is left, not destroyed
			}
			s.Destroy()
		}
	}
	if !drained {
		// Work left on a stream may still write the staging memory, the
		// connection buffers or a completion word: leave them all.
		errs = append(errs, errors.New("nccl: a channel's stream could not be drained: the communicator's device and page-locked memory were left allocated"))
		return errors.Join(errs...)
	}
	for _, e := range d.allEvents {
		e.Destroy()
	}
	for _, s := range d.allSlabs {
		s.dev.Free()
		s.host.Free()
	}
	for _, m := range d.allTemps {
		m.Free()
	}
	d.warm.Free()
	if !d.waitedOn {
		// A stream given to WaitOn may still be queued to read its word
		// (cuStreamWaitValue64 reads it when the stream gets there, which
		// may be after Close): then the words stay allocated, a few
		// hundred bytes per communicator.
		d.flagMem.Free()
	}
	d.flags, d.flagMem = nil, cuda.Pinned[uint64]{}
	d.events, d.allEvents, d.slabs, d.allSlabs, d.temps, d.allTemps = nil, nil, nil, nil, nil, nil
	return errors.Join(errs...)
}

// getStaged takes a per-group record from the free list.
func (d *device) getStaged() *staged {
	if n := len(d.staged); n > 0 {
		st := d.staged[n-1]
		d.staged = d.staged[:n-1]
		return st
	}
	return new(staged)
}

// getEvent takes an event from the free list, or makes one.
func (d *device) getEvent() (*cuda.Event, error) {
	if n := len(d.events); n > 0 {
		e := d.events[n-1]
		d.events = d.events[:n-1]
		return e, nil
	}
	e, err := cuda.NewEventNoTiming(d.dev)
	if err != nil {
		return nil, fmt.Errorf("nccl: creating an event: %w", err)
	}
	d.allEvents = append(d.allEvents, e)
	return e, nil
}

// getSlab returns the smallest free slab of at least need bytes, or
// allocates one of the next power of two (at least minSlab).
func (d *device) getSlab(need int64) (*slab, error) {
	best := -1
	for i, s := range d.slabs {
		if s.size() >= need && (best < 0 || s.size() < d.slabs[best].size()) {
			best = i
		}
	}
	if best >= 0 {
		s := d.slabs[best]
		d.slabs[best] = d.slabs[len(d.slabs)-1]
		d.slabs[len(d.slabs)-1] = nil
		d.slabs = d.slabs[:len(d.slabs)-1]
		return s, nil
	}
	size := int64(minSlab)
	if need > size {
		size = int64(1) << bits.Len64(uint64(need-1))
	}
	dm, err := cuda.Alloc[byte](d.dev, size)
	if err != nil {
		return nil, fmt.Errorf("nccl: allocating %d bytes of device memory to stage host buffers: %w", size, err)
	}
	hm, err := cuda.HostAlloc[byte](size)
	if err != nil {
		dm.Free()
		return nil, fmt.Errorf("nccl: allocating %d bytes of page-locked memory to stage host buffers: %w", size, err)
	}
	s := &slab{dev: dm, host: hm}
	d.allSlabs = append(d.allSlabs, s)
	return s, nil
}
