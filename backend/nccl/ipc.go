package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// The IPC path: ranks that share a GPU.
//
// NCCL cannot hold two ranks on one GPU, so a pair of ranks whose hellos
// name the same GPU (host and PCI bus) has no channels: its messages take
// this path instead (unless IPCEnv=0, when Open refuses the pair as
// before). The GPU's copy engines move the data, from the sender's memory,
// mapped into the receiver's process by its CUDA IPC handle, into the
// receiver's buffer; the host connection carries what the two ranks say to
// each other:
//
//   - DESC, sender to receiver, one per message, in order: the envelope
//     (sequence number, tag, element type, count) and either the payload
//     itself (a message of up to ipcInline bytes in host memory, copied
//     out of the send buffer when the send is described: the send then
//     completes at once, as a small message does on tcp) or where it lies
//     (the region of the sender's allocation: handle, number, offset,
//     size; see cuda.ExportIPC). A device buffer is never inline, however
//     small: reading it would be a copy on the sender's side too, and the
//     GPU switching between the two processes' contexts for it costs what
//     the whole message does (some 150 µs on an H200); the receiver's one
//     copy out of the mapping is all the GPU does per message;
//   - DONE, receiver to sender, for each message that was not inline,
//     once the receiver's copy has finished: the send completes then, and
//     only then may its buffer change;
//   - a forget, a DESC with no message, sender to receiver, in the same
//     numbered stream, once the sender has freed (cuda's Free) an
//     allocation whose region it gave the receiver: the receiver closes
//     its mapping of it, which would keep the memory until the cache
//     evicted it (cuda.WatchFrees; the mapping of memory this package did
//     not allocate waits for eviction).
//
// The host connection is shared memory between the ranks of one host
// (openControl), so DESC and DONE take a microsecond or so each.
//
// Each rank of the pair has, for the other, four stages: the sender
// (describes the sends posted, in order), the DESC reader, the copier
// (copies each matched message, in the order they matched) and the DONE
// reader. Each stage has a goroutine, and a goroutine waiting for one of
// the path's requests runs the stages no one else is running between its
// polls of the host connection (pumpIPC), so a message between two ranks
// that wait for it wakes no goroutine on its way. The two directions of a
// pair are independent, so a rank's send and receive with the same peer
// (Sendrecv, a halo exchange) move at once, on the two ranks' copy
// streams.
//
// Messages match as in MPI, with or without checks: a receive takes the
// oldest message from its source with its tag. The envelope comes with
// every message, so the checks cost nothing here and always apply
// (verdictOf): a message longer than its receive is ErrTruncate, another
// element type ErrMismatch, and with checks on the counts must be equal.
// A message never overtakes an earlier one from the same rank with the
// same tag.
//
// Host buffers are staged through device memory on the sending side (an
// exported staging allocation, reused) and copied straight out of the
// mapping on the receiving side. IsendOn orders the send after the
// caller's stream (the sender waits for an event recorded on it before it
// describes the message); IrecvOn makes the copy wait for the caller's
// stream on the GPU and the stream wait for the copy's end, through a word
// in page-locked memory that the copier writes (ipcMem.signal); WaitOn
// waits for that word.

const (
	// ipcDescTag and ipcDoneTag are the tags of DESC and DONE on the host
	// connection (envTag is 1; the library's own tags are negative).
	ipcDescTag = 2
	ipcDoneTag = 3
	// ipcDescSize is the size of a DESC without its inline payload.
	ipcDescSize = 128
	// ipcInline is the largest payload a DESC carries.
	ipcInline = 8 << 10
	// ipcDoneSize is the size of a DONE.
	ipcDoneSize = 8
)

// ipcDesc describes one message on the IPC path.
type ipcDesc struct {
	seq    uint64
	count  int64
	tag    int32
	typ    backend.DType
	inline bool           // the payload follows the descriptor
	forget bool           // no message: the sender freed allocation region.ID, so drop its mapping
	region cuda.IPCRegion // where the payload lies (not inline, not empty)
	data   []byte         // the inline payload (a view of the reader's buffer)
}

// bytes is the payload's size.
func (d *ipcDesc) bytes() int64 { return d.count * int64(d.typ.Size()) }

const (
	ipcFlagInline = 1
	ipcFlagForget = 2
)

// encode writes d into b (at least ipcDescSize bytes, and the inline
// payload after them) and returns the message's length.
func (d *ipcDesc) encode(b []byte) int {
	clear(b[:ipcDescSize])
	binary.LittleEndian.PutUint64(b[0:], d.seq)
	binary.LittleEndian.PutUint64(b[8:], uint64(d.count))
	binary.LittleEndian.PutUint32(b[16:], uint32(d.tag))
	b[20] = byte(d.typ)
	if d.inline {
		b[21] = ipcFlagInline
	}
	if d.forget {
		b[21] |= ipcFlagForget
	}
	binary.LittleEndian.PutUint64(b[24:], d.region.ID)
	binary.LittleEndian.PutUint64(b[32:], uint64(d.region.Offset))
	binary.LittleEndian.PutUint64(b[40:], uint64(d.region.Size))
	copy(b[48:112], d.region.Handle[:])
	if d.inline {
		return ipcDescSize + copy(b[ipcDescSize:], d.data)
	}
	return ipcDescSize
}

// decodeIPCDesc reads a DESC of n bytes and validates it: a payload that
// lies outside its region, or an inline one of the wrong length, is
// ErrCorrupt.
func decodeIPCDesc(b []byte) (ipcDesc, error) {
	if len(b) < ipcDescSize {
		return ipcDesc{}, fmt.Errorf("nccl: %w: a descriptor of %d bytes", backend.ErrCorrupt, len(b))
	}
	d := ipcDesc{
		seq:    binary.LittleEndian.Uint64(b[0:]),
		count:  int64(binary.LittleEndian.Uint64(b[8:])),
		tag:    int32(binary.LittleEndian.Uint32(b[16:])),
		typ:    backend.DType(b[20]),
		inline: b[21]&ipcFlagInline != 0,
		forget: b[21]&ipcFlagForget != 0,
	}
	d.region.ID = binary.LittleEndian.Uint64(b[24:])
	d.region.Offset = int64(binary.LittleEndian.Uint64(b[32:]))
	d.region.Size = int64(binary.LittleEndian.Uint64(b[40:]))
	copy(d.region.Handle[:], b[48:112])
	if !d.typ.Valid() || d.count < 0 || d.count > (1<<62)/int64(max(d.typ.Size(), 1)) || b[21]&^(ipcFlagInline|ipcFlagForget) != 0 ||
		b[22] != 0 || b[23] != 0 || !allZero(b[112:ipcDescSize]) {
		return ipcDesc{}, fmt.Errorf("nccl: %w: a descriptor of %d × type %d, flags %#x", backend.ErrCorrupt, d.count, b[20], b[21])
	}
	n := d.bytes()
	switch {
	case d.forget && (d.inline || n != 0 || d.region.ID == 0 || len(b) != ipcDescSize):
		return ipcDesc{}, fmt.Errorf("nccl: %w: a descriptor that forgets allocation %d carries a message (%d bytes, inline %v)", backend.ErrCorrupt, d.region.ID, n, d.inline)
	case d.inline:
		if n > ipcInline || int64(len(b)-ipcDescSize) != n {
			return ipcDesc{}, fmt.Errorf("nccl: %w: an inline payload of %d bytes for a message of %d", backend.ErrCorrupt, len(b)-ipcDescSize, n)
		}
		d.data = b[ipcDescSize:]
	case len(b) != ipcDescSize:
		return ipcDesc{}, fmt.Errorf("nccl: %w: %d bytes after a descriptor without an inline payload", backend.ErrCorrupt, len(b)-ipcDescSize)
	case n > 0 && (d.region.ID == 0 || d.region.Offset < 0 || d.region.Size <= 0 || d.region.Offset > d.region.Size || n > d.region.Size-d.region.Offset):
		return ipcDesc{}, fmt.Errorf("nccl: %w: %d bytes at offset %d of a region of %d", backend.ErrCorrupt, n, d.region.Offset, d.region.Size)
	}
	return d, nil
}

// allZero reports whether b holds only zeros (a descriptor's padding).
func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// ipcPeer is this rank's side of the IPC path with one other rank. The
// fields are guarded by the communicator's mutex, but for the stages'
// (see pumpIPC).
type ipcPeer struct {
	rank int
	// The stages: the sending stage's lock and its buffer, the copying
	// stage's lock and its batch, the reading stages; queued and matched
	// say, without the mutex, whether the sending and copying stages
	// have work (set under the mutex with the work, cleared by the stage
	// under the mutex when it finds none).
	sendMu  sync.Mutex
	sendBuf []byte
	copyMu  sync.Mutex
	doneOut [ipcDoneSize]byte
	// flights are the batches of copies on the GPU, a ring: inFlight of
	// them from first; deferred, the matched receives whose copies wait
	// for their callers' streams (streamPassedLocked); under copyMu.
	flights  [ipcFlights]ipcFlight
	first    int
	inFlight int
	deferred []ipcJob
	desc     ipcReader
	done     ipcReader
	queued   atomic.Bool
	matched  atomic.Bool
	// descNext is the number of the next DESC due; under desc.mu.
	descNext uint64
	// Sending: the sends posted and not yet described (the sender
	// goroutine takes them in order), the number of the next DESC, and
	// the sends described that wait for their DONE, by number.
	outq    []*request
	sendSeq uint64
	sends   map[uint64]*request
	// told: the allocations of this rank's whose regions went to the
	// peer (it may keep them mapped); forgets: those freed since, for
	// the sender to tell the peer (a forget DESC) so that it closes its
	// mapping, which would keep the memory otherwise.
	told    map[uint64]bool
	forgets []uint64
	// Receiving: the messages described that no receive has matched, the
	// receives that have matched none, and the matched pairs the copier
	// has not taken yet, each oldest first; descEnd says why no more
	// messages will come (the DESC reader ended), doneEnd why no more
	// DONEs will (the sends still waiting fail with it).
	msgs   []*ipcMsg
	spare  []*ipcMsg // messages done with, for reuse (newMsgLocked)
	posted []*request
	work   []ipcJob
	// copying: the receives the copying stage has taken and not yet
	// completed (on the GPU, or waiting for their streams), for the
	// pending-operation report.
	copying map[*request]struct{}
	descEnd error
	doneEnd error
	// Wakes the sender and the copier goroutines (capacity 1).
	sendWake, copyWake chan struct{}
}

// ipcMsg is a message described to this rank that no receive has taken.
type ipcMsg struct {
	d    ipcDesc
	data []byte // the inline payload, copied out of the reader's buffer
}

// ipcSpareMsgs bounds the messages a peer keeps for reuse.
const ipcSpareMsgs = 64

// newMsgLocked returns a message to fill: one the copier has finished
// with, or a new one; under the mutex.
func (ip *ipcPeer) newMsgLocked() *ipcMsg {
	if n := len(ip.spare); n > 0 {
		m := ip.spare[n-1]
		ip.spare[n-1] = nil
		ip.spare = ip.spare[:n-1]
		return m
	}
	return new(ipcMsg)
}

// freeMsgLocked keeps m, which no one refers to any more, for reuse
// (its inline payload's memory too); under the mutex.
func (ip *ipcPeer) freeMsgLocked(m *ipcMsg) {
	if len(ip.spare) < ipcSpareMsgs {
		*m = ipcMsg{data: m.data[:0]}
		ip.spare = append(ip.spare, m)
	}
}

// ipcJob is a receive matched to its message, for the copier.
type ipcJob struct {
	r       *request
	m       *ipcMsg
	verdict error
}

// ipcReq is what a request on the IPC path carries besides the common
// fields.
type ipcReq struct {
	after  *cuda.Event // IsendOn, IrecvOn: recorded on the caller's stream
	source ipcSource   // a send described from a region: what to give back at DONE
	slot   int         // the completion word the request writes (ipcMem.signal), or -1
	want   uint64      // the value it writes there
}

// ipcPath is the communicator's IPC path: the memory operations, and a
// peer for each rank that shares this rank's GPU (nil for the others).
type ipcPath struct {
	mem   ipcMem
	peers []*ipcPeer
	// stopWatch ends the watch of frees (cuda.WatchFrees; nil: none), and
	// endShare the rounding of allocations (cuda.ShareAllocations).
	stopWatch, endShare func()
	// pumpers counts the goroutines waiting for the path's requests,
	// which run its stages (pumpIPC): while there are any, work for the
	// sending and copying stages and arrivals for the reading ones wake
	// no goroutine (wake, ipcReader.arrive), and the last to stop wakes
	// those whose stage has work left (unpump).
	pumpers atomic.Int32
}

// wake wakes the goroutine of a stage that has work (its flag, queued or
// matched, set before), unless goroutines waiting for the path's
// requests run the stages: then one of them does the work, or the last
// of them to stop sees the flag and wakes the goroutine (unpump). The
// flag's store comes before the count's load here, and the count's
// store before the flag's load there, so one of the two sees the other.
func (p *ipcPath) wake(ch chan struct{}) {
	if p.pumpers.Load() == 0 {
		wakeUp(ch)
	}
}

// pump counts a goroutine in that runs the path's stages while it waits.
func (p *ipcPath) pump() { p.pumpers.Add(1) }

// unpump counts it out; the last one out wakes the goroutines of the
// stages that have work left.
func (p *ipcPath) unpump() {
	if p.pumpers.Add(-1) != 0 {
		return
	}
	for _, ip := range p.peers {
		if ip == nil {
			continue
		}
		if ip.queued.Load() {
			wakeUp(ip.sendWake)
		}
		if ip.matched.Load() {
			wakeUp(ip.copyWake)
		}
		for _, rd := range [...]*ipcReader{&ip.desc, &ip.done} {
			if rd.arrived.Load() {
				wakeUp(rd.wake)
			}
		}
	}
}

// newIPCPath makes the path to the ranks of on (true for those that
// share this rank's GPU), or returns nil when there are none.
func newIPCPath(mem ipcMem, on []bool) *ipcPath {
	var p *ipcPath
	for k, yes := range on {
		if !yes {
			continue
		}
		if p == nil {
			p = &ipcPath{mem: mem, peers: make([]*ipcPeer, len(on))}
		}
		ip := &ipcPeer{
			rank:     k,
			sendBuf:  make([]byte, ipcDescSize+ipcInline),
			sends:    make(map[uint64]*request),
			copying:  make(map[*request]struct{}),
			told:     make(map[uint64]bool),
			sendWake: make(chan struct{}, 1),
			copyWake: make(chan struct{}, 1),
		}
		ip.desc = ipcReader{tag: ipcDescTag, buf: make([]byte, ipcDescSize+ipcInline), wake: make(chan struct{}, 1)}
		ip.done = ipcReader{tag: ipcDoneTag, buf: make([]byte, ipcDoneSize), wake: make(chan struct{}, 1)}
		for _, rd := range [...]*ipcReader{&ip.desc, &ip.done} {
			rd.arrive = func() {
				rd.arrived.Store(true)
				if p.pumpers.Load() == 0 {
					wakeUp(rd.wake)
				}
			}
		}
		p.peers[k] = ip
	}
	return p
}

// Transport names what carries messages from this rank to rank p:
// "self", "cuda-ipc" for a rank that shares this rank's GPU, "nccl" for
// the others, "" outside the communicator (mp.Comm.Transport).
func (c *conn) Transport(p int) string {
	switch {
	case p < 0 || p >= c.size:
		return ""
	case p == c.rank:
		return "self"
	case c.ipcPeerOf(p) != nil:
		return "cuda-ipc"
	}
	return "nccl"
}

// ipcPeerOf returns the IPC path's peer p, or nil when messages with p
// take the channels.
func (c *conn) ipcPeerOf(p int) *ipcPeer {
	if c.ipc == nil || p < 0 || p >= len(c.ipc.peers) {
		return nil
	}
	return c.ipc.peers[p]
}

// startIPC starts the goroutines of every IPC peer.
func (c *conn) startIPC() {
	if c.ipc == nil {
		return
	}
	if _, ok := c.ipc.mem.(*cudaIPC); ok {
		c.ipc.stopWatch = cuda.WatchFrees(c.ipcFreed)
		// Each allocation a block of its own: a region given to a peer
		// exports its whole block, and a peer that has opened one
		// allocation of a block cannot open another of it.
		c.ipc.endShare = cuda.ShareAllocations()
	}
	for _, ip := range c.ipc.peers {
		if ip == nil {
			continue
		}
		ip.desc.take = func(st backend.Status, err error) bool { return c.ipcTakeDesc(ip, st, err) }
		ip.done.take = func(st backend.Status, err error) bool { return c.ipcTakeDone(ip, st, err) }
		c.wg.Add(4)
		go c.ipcSender(ip)
		go c.ipcRead(&ip.desc, ip.rank)
		go c.ipcCopier(ip)
		go c.ipcRead(&ip.done, ip.rank)
	}
}

// ipcFreed is told that this process freed exported allocation id: the
// peers its regions went to are told to forget it (ipcSender).
func (c *conn) ipcFreed(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ip := range c.ipc.peers {
		if ip != nil && ip.told[id] {
			delete(ip.told, id)
			ip.forgets = append(ip.forgets, id)
			ip.queued.Store(true)
			c.ipc.wake(ip.sendWake)
		}
	}
}

// wakeUp puts a token in ch without blocking.
func wakeUp(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// placeIPCLocked places request r on the IPC path: a send goes to the
// sender's queue; a receive matches the oldest message described with its
// tag, or waits for one.
func (c *conn) placeIPCLocked(ip *ipcPeer, r *request) error {
	r.stage = stageIPC
	if r.ipc == nil {
		r.ipcHeld = ipcReq{slot: -1}
		r.ipc = &r.ipcHeld
	}
	if !r.recv {
		ip.outq = append(ip.outq, r)
		ip.queued.Store(true)
		if !describedByPoster(r) {
			c.ipc.wake(ip.sendWake)
		}
		// Else the poster describes it itself once it lets the mutex go
		// (describeOwn).
		return nil
	}
	if ip.descEnd != nil && !c.ipcHasTagLocked(ip, r.tag) {
		return ip.descEnd
	}
	ip.posted = append(ip.posted, r)
	c.ipcMatchLocked(ip)
	return nil
}

// describedByPoster reports whether send r's poster describes it
// (describeOwn): unless the send must wait for its caller's stream
// (IsendOnStream) or its buffer is host memory too large to go inline
// (describing it is a copy to the GPU, which Isend leaves to the stage's
// goroutine).
func describedByPoster(r *request) bool {
	return r.ipc.after == nil && (r.buf.Mem == backend.Device || r.buf.Len() <= ipcInline)
}

// describeOwn is what the poster of send r does once placeIPCLocked has
// queued it (and the mutex is let go): it describes what waits to be
// sent to r's rank, r included, itself, as a small message on tcp goes out
// in its Isend; if another goroutine is describing, that one takes r, or
// the stage's goroutine is woken. A send that must wait for its caller's
// stream was woken for already (placeIPCLocked), and is not given here.
func (c *conn) describeOwn(ip *ipcPeer) {
	if ip.sendMu.TryLock() {
		c.ipcSendStep(ip, true)
		ip.sendMu.Unlock()
		return
	}
	c.ipc.wake(ip.sendWake)
}

// ipcHasTagLocked reports whether a message with tag waits.
func (c *conn) ipcHasTagLocked(ip *ipcPeer, tag int) bool {
	for _, m := range ip.msgs {
		if int(m.d.tag) == tag {
			return true
		}
	}
	return false
}

// ipcMatchLocked pairs posted receives with described messages, by tag,
// oldest first, and hands the pairs to the copier.
func (c *conn) ipcMatchLocked(ip *ipcPeer) {
	matched := false
	kept := ip.posted[:0]
	for _, r := range ip.posted {
		i := -1
		for k, m := range ip.msgs {
			if int(m.d.tag) == r.tag {
				i = k
				break
			}
		}
		if i < 0 {
			kept = append(kept, r)
			continue
		}
		m := ip.msgs[i]
		ip.msgs = append(ip.msgs[:i], ip.msgs[i+1:]...)
		ip.work = append(ip.work, ipcJob{r: r, m: m, verdict: c.verdictOf(r, ip.rank, int(m.d.tag), m.d.typ, m.d.count)})
		matched = true
	}
	clear(ip.posted[len(kept):])
	ip.posted = kept
	if ip.descEnd != nil {
		// Nothing more will come: the receives left can never match.
		for _, r := range ip.posted {
			c.ipcCompleteLocked(r, backend.Status{}, ip.descEnd)
		}
		clear(ip.posted)
		ip.posted = ip.posted[:0]
	}
	if matched {
		ip.matched.Store(true)
		c.ipc.wake(ip.copyWake)
	}
}

// ipcCompleteLocked completes an IPC request and writes its completion
// word, if a stream waits for it.
func (c *conn) ipcCompleteLocked(r *request, st backend.Status, err error) {
	if r.stage == stageDone {
		return
	}
	if q := r.ipc; q != nil && q.slot >= 0 {
		c.ipc.mem.signal(q.slot, q.want)
		q.slot = -1
	}
	if q := r.ipc; q != nil && q.source.release != nil {
		q.source.release()
		q.source.release = nil
	}
	if q := r.ipc; q != nil && q.after != nil {
		q.after.Destroy()
		q.after = nil
	}
	r.complete(st, err)
}

// waitIPC returns the next token of ch, or false once the communicator
// stops.
func (c *conn) waitIPC(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-c.stop:
		return false
	}
}

// The path's four stages for each peer (describing the sends, reading
// the DESCs, copying, reading the DONEs) are each run by whoever holds
// the stage's lock: the stage's own goroutine, which sleeps until there
// is work, or a goroutine waiting for one of the path's requests, which
// runs every stage no one else is running between its polls of the host
// connection (pumpIPC). A message whose sender and receiver both wait so
// moves through the four stages with no goroutine to wake on the way:
// each hand-off to a goroutine that must be woken costs microseconds, and
// in a rank that mpirun binds to one core the woken goroutine waits for
// the waiter's time slice. The stages' goroutines are what moves messages
// when no one waits (an Isend left to complete while the program
// computes, a stream that waits on the GPU).
//
// Lock order: a stage's lock, then the communicator's mutex; a stage's
// lock is never taken (but by TryLock) while holding the mutex.

// ipcReader is one stage that reads the host connection (the DESCs or the
// DONEs of a peer): one receive stays posted for the next message, and
// whoever holds mu takes what it received and posts the next.
//
// The stage's goroutine sleeps on wake, not on the receive: an arrival
// wakes it only while no goroutine waiting for the path's requests runs
// the stages (pumpIPC), which take the arrival themselves. A goroutine
// woken for every arrival, in a rank that mpirun binds to one core, takes
// the core from the very waiter that takes the arrival, on the message's
// way.
type ipcReader struct {
	mu  sync.Mutex
	tag int
	buf []byte
	// r is the receive posted for the next message (nil before the first
	// step, and once the stream ended).
	r     backend.Request
	ended bool
	// arrived is set when r completes (arrive, its Notify) and cleared
	// once r is taken and released (after arrive has run); the last
	// pumper out looks at it (unpump).
	arrived atomic.Bool
	// wake rouses the stage's goroutine (capacity 1); wakes counts the
	// times it was roused (for the tests).
	wake  chan struct{}
	wakes atomic.Int64
	// arrive is what r's completion calls: the store of arrived comes
	// before the load of the pumpers' count, and unpump's store of the
	// count before its load of arrived, so one of the two wakes the
	// goroutine for an arrival that no pumper took.
	arrive func()
	// take handles one message (or the error that ends the stream) and
	// reports whether the stream ended; under mu.
	take func(st backend.Status, err error) bool
}

// notifier is a request of the host connection's engine that calls a
// function when it completes (engine's Notify).
type notifier interface{ Notify(f func()) }

// completed is what a host connection's request offers to look at its
// state without polling (engine's Completed).
type completed interface{ Completed() bool }

// isComplete reports whether r has completed, polling the host
// connection only where r cannot say otherwise.
func isComplete(r backend.Request) bool {
	if q, ok := r.(completed); ok {
		return q.Completed()
	}
	done, _, _ := r.Test()
	return done
}

// step takes the messages that have arrived, posting a receive for the
// next each time, and reports whether it took any; under rd.mu.
func (c *conn) readStep(rd *ipcReader, peer int) bool {
	did := false
	for !rd.ended {
		if rd.r == nil {
			r, err := c.ctl.tc.Irecv(hostBytes(rd.buf), peer, rd.tag, 0)
			if err != nil {
				rd.ended = rd.take(backend.Status{}, err)
				wakeUp(rd.wake) // to see the end
				return true
			}
			n, ok := r.(notifier)
			if !ok { // the host connection is the tcp backend's engine: never
				rd.ended = rd.take(backend.Status{}, fmt.Errorf("nccl: %w: the host connection's receives cannot call back at completion", backend.ErrNotSupported))
				wakeUp(rd.wake)
				return true
			}
			rd.r = r
			n.Notify(rd.arrive)
		}
		if !isComplete(rd.r) {
			return did
		}
		st, err := rd.r.Wait(0)
		rd.r.Release() // waits for arrive, if it is running
		rd.arrived.Store(false)
		rd.r = nil
		did = true
		if rd.ended = rd.take(st, err); rd.ended {
			wakeUp(rd.wake) // to see the end
		}
	}
	return did
}

// ipcRead is the goroutine of a reading stage: it runs the stage, then
// sleeps until woken (arrive, unpump), until the stream ends.
func (c *conn) ipcRead(rd *ipcReader, peer int) {
	defer c.wg.Done()
	for {
		rd.mu.Lock()
		c.readStep(rd, peer)
		ended := rd.ended
		rd.mu.Unlock()
		if ended {
			return
		}
		<-rd.wake
		rd.wakes.Add(1)
	}
}

// pumpIPC runs, for every peer of the IPC path, each stage that no one
// else is running, once: the waits for the path's requests call it
// between their polls of the host connection.
func (c *conn) pumpIPC() {
	if c.ipc == nil || c.ctl == nil {
		return
	}
	for _, ip := range c.ipc.peers {
		if ip == nil {
			continue
		}
		if ip.queued.Load() && ip.sendMu.TryLock() {
			c.ipcSendStep(ip, true)
			ip.sendMu.Unlock()
		}
		if ip.desc.mu.TryLock() {
			c.readStep(&ip.desc, ip.rank)
			ip.desc.mu.Unlock()
		}
		if ip.matched.Load() && ip.copyMu.TryLock() {
			c.ipcCopyStep(ip)
			ip.copyMu.Unlock()
		}
		if ip.done.mu.TryLock() {
			c.readStep(&ip.done, ip.rank)
			ip.done.mu.Unlock()
		}
	}
}

// ipcSender is the goroutine of the sending stage: woken for each send
// posted (and each forget), it describes what waits.
func (c *conn) ipcSender(ip *ipcPeer) {
	defer c.wg.Done()
	for c.waitIPC(ip.sendWake) {
		ip.sendMu.Lock()
		c.ipcSendStep(ip, false)
		ip.sendMu.Unlock()
	}
}

// ipcSendStep describes the sends to ip's rank, in the order they were
// posted (inline, or by the region of their memory), and the forgets,
// until none waits; under ip.sendMu. A pumper (a goroutine that waits for
// a request of the path, not the stage's own) leaves a send that must
// first wait for its caller's stream (IsendOnStream) to the stage's
// goroutine, and wakes it: a pumper that blocked for the program's GPU
// work would hold up every stage (pumpers leave the others' goroutines
// asleep), and that work may itself wait for one of them.
func (c *conn) ipcSendStep(ip *ipcPeer, pumper bool) {
	buf := ip.sendBuf
	for {
		c.mu.Lock()
		if len(ip.forgets) > 0 {
			id := ip.forgets[0]
			ip.forgets = slices.Delete(ip.forgets, 0, 1) // in place: q[1:] would give the array up
			d := ipcDesc{forget: true, typ: backend.Uint8, region: cuda.IPCRegion{ID: id}, seq: ip.sendSeq}
			ip.sendSeq++
			c.mu.Unlock()
			m := d.encode(buf)
			c.ctl.send(hostBytes(buf[:m]), ip.rank, ipcDescTag, 0) // a peer that is gone has no mapping to close
			continue
		}
		if len(ip.outq) == 0 {
			ip.queued.Store(false)
			c.mu.Unlock()
			return
		}
		r := ip.outq[0]
		if pumper && r.stage != stageDone && r.ipc.after != nil {
			c.mu.Unlock()
			wakeUp(ip.sendWake)
			return
		}
		ip.outq = slices.Delete(ip.outq, 0, 1) // in place: q[1:] would give the array up
		if r.stage == stageDone {              // failed meanwhile (a lost peer, Abort)
			c.mu.Unlock()
			continue
		}
		if lost := c.peers[ip.rank].lost; lost != nil {
			c.ipcCompleteLocked(r, backend.Status{}, lost)
			c.mu.Unlock()
			continue
		}
		c.mu.Unlock()
		c.ipcDescribe(ip, r, buf)
	}
}

// ipcTakeDesc is the DESC stage's take: it matches the message described
// (or queues the forget behind the copies matched before it), and, when
// the host connection ends, fails the receives that matched nothing: no
// more messages will come. Under ip.desc.mu.
func (c *conn) ipcTakeDesc(ip *ipcPeer, st backend.Status, err error) bool {
	var d ipcDesc
	if err == nil {
		d, err = decodeIPCDesc(ip.desc.buf[:st.Count])
		if err == nil && d.seq != ip.descNext {
			err = fmt.Errorf("nccl: %w: descriptor %d came where %d was due", backend.ErrCorrupt, d.seq, ip.descNext)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if errors.Is(err, backend.ErrCorrupt) {
			err = fmt.Errorf("nccl: the IPC descriptors from rank %d: %w", ip.rank, err)
		} else {
			err = c.ipcLinkErr(ip.rank, err)
		}
		ip.descEnd = err
		c.ipcMatchLocked(ip)
		return true
	}
	ip.descNext++
	if d.forget {
		// In order behind the copies matched before it: the copier
		// closes the mapping once they have run.
		m := ip.newMsgLocked()
		m.d = d
		ip.work = append(ip.work, ipcJob{m: m})
		ip.matched.Store(true)
		c.ipc.wake(ip.copyWake)
		return false
	}
	m := ip.newMsgLocked()
	m.d = d
	if d.inline {
		m.data = append(m.data[:0], d.data...)
		m.d.data = nil
	}
	ip.msgs = append(ip.msgs, m)
	c.ipcMatchLocked(ip)
	return false
}

// ipcCopier is the goroutine of the copying stage: woken when receives
// match their messages, it runs the stage (ipcCopyRun). When the
// communicator stops it finishes the batches still on the GPU (Close
// waits for it) and fails the receives still waiting for their callers'
// streams.
func (c *conn) ipcCopier(ip *ipcPeer) {
	defer c.wg.Done()
	for c.waitIPC(ip.copyWake) {
		c.ipcCopyRun(ip)
	}
	ip.copyMu.Lock()
	defer ip.copyMu.Unlock()
	for ip.inFlight > 0 {
		c.ipcAwaitFirst(ip)
		c.ipcCopyStep(ip)
	}
	c.mu.Lock()
	for _, j := range ip.deferred {
		c.ipcCompleteLocked(j.r, backend.Status{}, fmt.Errorf("nccl: %w before the receive's stream let its copy start", backend.ErrClosed))
		delete(ip.copying, j.r)
		ip.freeMsgLocked(j.m)
	}
	c.mu.Unlock()
	clear(ip.deferred)
	ip.deferred = nil
}

// ipcCopyRun runs the copying stage until nothing is left on the GPU or
// waiting for a stream, or goroutines that wait for the path's requests
// run it (they finish the batches; the last of them to stop wakes this
// goroutine if some are left: ipcPath.unpump). It polls, yielding between
// looks; after ipcPollFor without a move it blocks in the driver for the
// oldest batch, as awaitEvent does, or, where only receives waiting for
// their streams are left (the program's GPU work, which may take long),
// it sleeps between looks.
func (c *conn) ipcCopyRun(ip *ipcPeer) {
	start := time.Now()
	for i := 1; ; i++ {
		ip.copyMu.Lock()
		busy, moved := c.ipcCopyStep(ip)
		nap := time.Duration(0)
		if busy && !moved && i%64 == 0 && time.Since(start) > ipcPollFor {
			if ip.inFlight > 0 {
				c.ipcAwaitFirst(ip)
				moved = true
			} else {
				nap = ipcStreamNap
			}
		}
		ip.copyMu.Unlock()
		if !busy || c.ipc.pumpers.Load() > 0 {
			return
		}
		select {
		case <-c.stop:
			return // ipcCopier finishes what is on the GPU
		default:
		}
		if moved {
			start = time.Now()
		}
		if nap > 0 {
			time.Sleep(nap)
			continue
		}
		runtime.Gosched()
	}
}

// ipcStreamNap is how long the copying stage's goroutine sleeps between
// its looks at the callers' streams that receives wait for, once it has
// polled them for ipcPollFor.
const ipcStreamNap = 100 * time.Microsecond

// ipcAwaitFirst waits until the oldest batch on the GPU has run (its
// mark has passed; ipcCopyStep then finishes it); under ip.copyMu.
func (c *conn) ipcAwaitFirst(ip *ipcPeer) {
	if f := &ip.flights[ip.first]; ip.inFlight > 0 && f.marked {
		if err := c.ipc.mem.awaitMark(ip.rank, ip.first); err != nil {
			f.fail(ip.rank, err)
		}
		f.marked = false
	}
}

// ipcFlights bounds the batches of copies a peer's copying stage keeps on
// the GPU at once, each with a mark of its own: messages that match while
// the copies before them run are queued behind them, so the copy engine
// never waits for the CPU between batches.
const ipcFlights = 8

// ipcBatch bounds the copies of one batch.
const ipcBatch = 64

// ipcFlight is a batch of matched messages whose copies are queued on the
// GPU. Once its mark has passed, the batch is finished: the sender told
// (DONE) and the receives completed, in the order they matched.
type ipcFlight struct {
	jobs []ipcJob
	errs []error // by job: why its copy failed (nil: it did not)
	// marked: a mark follows the batch's copies on the stream, not yet
	// seen to pass (none is set where no copy went on the stream).
	marked bool
}

// fail records err for each of the batch's copies that had none.
func (f *ipcFlight) fail(peer int, err error) {
	for i := range f.errs {
		if f.errs[i] == nil {
			f.errs[i] = fmt.Errorf("nccl: copying messages from rank %d: %w", peer, err)
		}
	}
}

// ipcCopyStep runs the copying stage without waiting for the GPU: it
// finishes the batches whose copies have run, oldest first, and queues
// the matched pairs that wait as new batches while there is room, until
// neither moves. It reports whether work is left on the GPU or waiting
// for a stream, and whether it moved anything. Under ip.copyMu.
func (c *conn) ipcCopyStep(ip *ipcPeer) (busy, moved bool) {
	for {
		did := false
		for ip.inFlight > 0 {
			f := &ip.flights[ip.first]
			if f.marked {
				done, err := c.ipc.mem.marked(ip.rank, ip.first)
				if err == nil && !done {
					break
				}
				if err != nil {
					f.fail(ip.rank, err)
				}
				f.marked = false
			}
			c.ipcFinish(ip, f)
			ip.first = (ip.first + 1) % ipcFlights
			ip.inFlight--
			did = true
		}
		if ip.inFlight < ipcFlights && c.ipcLaunch(ip) {
			did = true
		}
		if !did {
			break
		}
		moved = true
	}
	if ip.inFlight > 0 || len(ip.deferred) > 0 {
		return true, moved
	}
	c.mu.Lock()
	if len(ip.work) == 0 {
		ip.matched.Store(false)
	}
	c.mu.Unlock()
	return false, moved
}

// streamPassedLocked reports whether j's receive may be copied: it does
// not wait for its caller's stream (IrecvOnStream), or the stream has
// passed the point of its post (the event recorded there has fired, or
// failed: the copy then fails too), or the receive has ended meanwhile.
// The event is let go once passed. Under the mutex and ip.copyMu.
//
// The copier looks, rather than making its copy stream wait on the GPU:
// the stream of one receive may wait for the completion of another (one
// stream's receives in a row each make it wait for theirs), which may have
// matched after it, and a copy stream that waited there, ahead of that
// other copy, would wait for ever.
func (c *conn) streamPassedLocked(j *ipcJob) bool {
	r := j.r
	if r == nil || r.ipc.after == nil || r.stage == stageDone {
		return true
	}
	done, err := r.ipc.after.Query()
	if err == nil && !done {
		return false
	}
	if err != nil && j.verdict == nil {
		j.verdict = fmt.Errorf("nccl: waiting for the receive's stream: %w", err)
	}
	r.ipc.after.Destroy()
	r.ipc.after = nil
	return true
}

// ipcLaunch takes as a batch the receives that waited for their streams
// and may now be copied, and the oldest matched pairs (up to ipcBatch in
// all), leaving aside those that must wait for their callers' streams;
// it queues their copies on the peer's copy stream, and a mark after
// them. It reports whether it took any pair. Under ip.copyMu, with room
// for a batch.
func (c *conn) ipcLaunch(ip *ipcPeer) bool {
	slot := (ip.first + ip.inFlight) % ipcFlights
	f := &ip.flights[slot]
	jobs := f.jobs[:0]
	c.mu.Lock()
	kept := ip.deferred[:0]
	for i := range ip.deferred {
		if j := &ip.deferred[i]; len(jobs) < ipcBatch && c.streamPassedLocked(j) {
			jobs = append(jobs, *j)
		} else {
			kept = append(kept, *j)
		}
	}
	clear(ip.deferred[len(kept):])
	ip.deferred = kept
	k := min(len(ip.work), ipcBatch-len(jobs))
	for i := range ip.work[:k] {
		j := &ip.work[i]
		if j.r != nil {
			ip.copying[j.r] = struct{}{}
		}
		if c.streamPassedLocked(j) {
			jobs = append(jobs, *j)
		} else {
			ip.deferred = append(ip.deferred, *j)
		}
	}
	// Deleted from the front in place, not resliced: q = q[k:] gives the
	// array's front up for good, and a queue that empties and fills
	// again, a message at a time, took a new array every message.
	ip.work = slices.Delete(ip.work, 0, k)
	c.mu.Unlock()
	f.jobs = jobs
	if len(jobs) == 0 {
		return k > 0
	}
	errs := f.errs[:0]
	queued := false
	for _, j := range jobs {
		d := &j.m.d
		if d.forget {
			errs = append(errs, nil)
			continue
		}
		err := j.verdict
		if err == nil && d.bytes() > 0 && !j.r.done.Load() {
			if d.inline {
				err = c.ipc.mem.writeIn(ip.rank, j.r.buf, j.m.data)
			} else {
				err = c.ipc.mem.copyIn(ip.rank, j.r.buf, d.region, d.bytes())
			}
			queued = queued || err == nil
			if err != nil {
				err = fmt.Errorf("nccl: copying a message of %d bytes from rank %d: %w", d.bytes(), ip.rank, err)
			}
		}
		errs = append(errs, err)
	}
	f.errs = errs
	f.marked = false
	if queued {
		if err := c.ipc.mem.mark(ip.rank, slot); err != nil {
			// Their end cannot be seen: the receives fail.
			f.fail(ip.rank, fmt.Errorf("marking the copies' end: %w", err))
		} else {
			f.marked = true
		}
	}
	ip.inFlight++
	return true
}

// ipcFinish finishes batch f, whose copies have run: it closes the
// mappings its forgets name (no copy queued before reads them any more),
// tells the sender of each message of its memory that it is copied
// (DONE), and completes the receives. Under ip.copyMu.
func (c *conn) ipcFinish(ip *ipcPeer, f *ipcFlight) {
	for _, j := range f.jobs {
		if j.m.d.forget {
			c.ipc.mem.forget(ip.rank, j.m.d.region.ID)
		}
	}
	done := &ip.doneOut
	for _, j := range f.jobs {
		if d := &j.m.d; !d.inline && !d.forget {
			binary.LittleEndian.PutUint64(done[:], d.seq)
			c.ctl.send(hostBytes(done[:]), ip.rank, ipcDoneTag, 0) // a sender that is gone needs no DONE
		}
	}
	c.mu.Lock()
	for i, j := range f.jobs {
		if d := &j.m.d; !d.forget {
			c.ipcCompleteLocked(j.r, backend.Status{Source: ip.rank, Tag: int(d.tag), Count: d.count}, f.errs[i])
			delete(ip.copying, j.r)
		}
		ip.freeMsgLocked(j.m)
	}
	c.mu.Unlock()
	clear(f.jobs)
	f.jobs = f.jobs[:0]
	clear(f.errs)
	f.errs = f.errs[:0]
}

// ipcTakeDone is the DONE stage's take: it completes the send the DONE
// names, and, when the host connection ends, fails the sends still
// waiting. Under ip.done.mu.
func (c *conn) ipcTakeDone(ip *ipcPeer, st backend.Status, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && st.Count != ipcDoneSize {
		err = fmt.Errorf("nccl: %w: a DONE of %d bytes from rank %d", backend.ErrCorrupt, st.Count, ip.rank)
	}
	var r *request
	if err == nil {
		seq := binary.LittleEndian.Uint64(ip.done.buf)
		if r = ip.sends[seq]; r == nil {
			err = fmt.Errorf("nccl: %w: rank %d reported message %d copied, which is not one of this rank's sends in flight", backend.ErrCorrupt, ip.rank, seq)
		}
		delete(ip.sends, seq)
	}
	if err != nil {
		if !errors.Is(err, backend.ErrCorrupt) {
			err = c.ipcLinkErr(ip.rank, err)
		}
		ip.doneEnd = err
		for seq, r := range ip.sends {
			c.ipcCompleteLocked(r, backend.Status{}, err)
			delete(ip.sends, seq)
		}
		return true
	}
	c.ipcCompleteLocked(r, backend.Status{Source: c.rank, Tag: r.tag, Count: r.buf.Count}, nil)
	return false
}

// ipcDescribe sends r's DESC (with its payload, or its region) and, for
// an inline one, completes r.
func (c *conn) ipcDescribe(ip *ipcPeer, r *request, buf []byte) {
	fail := func(err error) {
		c.mu.Lock()
		c.ipcCompleteLocked(r, backend.Status{}, err)
		c.mu.Unlock()
	}
	if ev := c.takeAfter(r); ev != nil {
		err := awaitEvent(ev)
		ev.Destroy()
		if err != nil {
			fail(fmt.Errorf("nccl: waiting for the caller's stream before a send to rank %d: %w", ip.rank, err))
			return
		}
	}
	d := ipcDesc{tag: int32(r.tag), typ: r.buf.Type, count: r.buf.Count}
	n := r.buf.Len()
	var src ipcSource
	if n == 0 || n <= ipcInline && r.buf.Mem == backend.Host {
		d.inline = true
		d.data = buf[ipcDescSize : ipcDescSize+n]
		if err := c.ipc.mem.readOut(d.data, r.buf); err != nil {
			fail(fmt.Errorf("nccl: copying a message of %d bytes to rank %d out of its buffer: %w", n, ip.rank, err))
			return
		}
	} else {
		var err error
		if src, err = c.ipc.mem.export(r.buf); err != nil {
			fail(fmt.Errorf("nccl: exporting a send buffer of %d bytes to rank %d: %w", n, ip.rank, err))
			return
		}
		d.region = src.region
	}
	c.mu.Lock()
	d.seq = ip.sendSeq
	ip.sendSeq++
	if !d.inline {
		r.ipc.source = src
		ip.sends[d.seq] = r
		ip.told[src.region.ID] = true
	}
	c.mu.Unlock()
	m := d.encode(buf)
	err := c.ctl.send(hostBytes(buf[:m]), ip.rank, ipcDescTag, r.caller)
	if err == nil && !d.inline {
		return // its DONE completes it
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		delete(ip.sends, d.seq)
		c.ipcCompleteLocked(r, backend.Status{}, c.ipcLinkErr(ip.rank, err))
		return
	}
	if d.inline {
		c.ipcCompleteLocked(r, backend.Status{Source: c.rank, Tag: r.tag, Count: r.buf.Count}, nil)
	}
}

// ipcLinkErr is the error of an operation whose host connection message
// failed: the rank's loss if it is lost.
func (c *conn) ipcLinkErr(p int, err error) error {
	if lost := c.peers[p].lost; lost != nil {
		return lost
	}
	if errors.Is(err, backend.ErrPeerLost) || errors.Is(err, backend.ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: rank %d: %w", backend.ErrPeerLost, p, err)
}

// ipcLostLocked ends what waits on rank p of the IPC path when p is lost:
// the sends not yet described. The sends described wait for their DONE,
// and the receives for their messages, until the host connection's
// streams from p end (the DONE and DESC readers fail them then): what p
// said before it left still counts.
func (c *conn) ipcLostLocked(p int, err error) {
	ip := c.ipcPeerOf(p)
	if ip == nil {
		return
	}
	for _, r := range ip.outq {
		c.ipcCompleteLocked(r, backend.Status{}, err)
	}
	clear(ip.outq)
	ip.outq = ip.outq[:0]
}

// ipcFailAllLocked ends every operation of the IPC path with err (Close,
// Abort). A copy under way finishes first: the copier completes its
// receive once it has (Close waits for it).
func (c *conn) ipcFailAllLocked(err error) {
	if c.ipc == nil {
		return
	}
	for _, ip := range c.ipc.peers {
		if ip == nil {
			continue
		}
		for _, r := range ip.outq {
			c.ipcCompleteLocked(r, backend.Status{}, err)
		}
		ip.outq = nil
		for seq, r := range ip.sends {
			c.ipcCompleteLocked(r, backend.Status{}, err)
			delete(ip.sends, seq)
		}
		for _, r := range ip.posted {
			c.ipcCompleteLocked(r, backend.Status{}, err)
		}
		ip.posted = nil
		for _, j := range ip.work {
			if j.r != nil { // nil: a forget, no request
				c.ipcCompleteLocked(j.r, backend.Status{}, err)
			}
		}
		ip.work = nil
		ip.msgs = nil
		if ip.descEnd == nil {
			ip.descEnd = err
		}
	}
}

// ipcPendingLocked describes the IPC path's operations for Pending.
func (c *conn) ipcPendingLocked(out []backend.OpInfo) []backend.OpInfo {
	if c.ipc == nil {
		return out
	}
	for _, ip := range c.ipc.peers {
		if ip == nil {
			continue
		}
		for _, r := range ip.outq {
			out = append(out, r.info())
		}
		for _, r := range ip.sends {
			out = append(out, r.info())
		}
		for _, r := range ip.posted {
			out = append(out, r.info())
		}
		for _, j := range ip.work {
			if j.r != nil { // nil: a forget, no request
				out = append(out, j.r.info())
			}
		}
		for r := range ip.copying {
			if r.stage != stageDone {
				out = append(out, r.info())
			}
		}
	}
	return out
}

// ipcProbeLocked is Iprobe for a rank of the IPC path: the oldest message
// described with tag that no receive has taken.
func (c *conn) ipcProbeLocked(ip *ipcPeer, tag int) (bool, backend.Status) {
	for _, m := range ip.msgs {
		if int(m.d.tag) == tag {
			return true, backend.Status{Source: ip.rank, Tag: tag, Count: m.d.count}
		}
	}
	return false, backend.Status{}
}

// ipcCancelLocked takes receive r back if it has matched nothing.
func (c *conn) ipcCancelLocked(ip *ipcPeer, r *request) bool {
	var ok bool
	ip.posted, ok = without(ip.posted, r)
	return ok
}

// ipcWaitOnLocked makes s wait, on the GPU, for IPC request r: for the
// completion word its completion writes.
func (c *conn) ipcWaitOnLocked(r *request, s *cuda.Stream) error {
	q := r.ipc
	if r.recv && r.buf.Mem == backend.Host {
		return fmt.Errorf("%w: WaitOn: a receive into host memory is ready only when Wait or Test reports it; receive into device memory to wait on the GPU",
			backend.ErrNotSupported)
	}
	if q.slot < 0 {
		slot, want, err := c.ipc.mem.newSlot()
		if err != nil {
			return err
		}
		q.slot, q.want = slot, want
	}
	return c.ipc.mem.waitSlot(s, q.slot, q.want)
}

// ipcPostOn is postOn for a rank of the IPC path: an event recorded on s
// orders the operation after s's work (the sender waits for it before it
// describes the message; the copier's stream waits for it before the
// copy), and s waits for the request's completion word.
func (c *conn) ipcPostOn(recv bool, buf backend.Buffer, peer, tag int, caller uintptr, s *cuda.Stream) (backend.Request, error) {
	ev, err := cuda.NewEventNoTiming(s.Device())
	if err == nil {
		if err = ev.Record(s); err != nil {
			ev.Destroy()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("nccl: recording an event on the caller's stream: %w", err)
	}
	if err := c.validate(buf); err != nil {
		ev.Destroy()
		return nil, err
	}
	r := newRequest(c, recv, buf, peer, tag, caller)
	r.ipcHeld = ipcReq{slot: -1, after: ev}
	r.ipc = &r.ipcHeld
	c.mu.Lock()
	defer c.mu.Unlock()
	err = c.usableLocked(peer, recv)
	if err == nil {
		err = c.revokedForLocked(tag)
	}
	if err == nil {
		err = c.placeIPCLocked(c.ipcPeerOf(peer), r)
	}
	if err == nil && r.stage != stageDone {
		err = c.ipcWaitOnLocked(r, s)
		if err != nil {
			// Not handed out: it goes on, but no stream waits for it.
			return nil, err
		}
	}
	if err != nil {
		ev.Destroy()
		r.ipc.after = nil
		r.recycle()
		return nil, err
	}
	return r, nil
}

// takeAfter returns r's caller-stream event for its one user (the sender
// or the copier), who destroys it.
func (c *conn) takeAfter(r *request) *cuda.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev := r.ipc.after
	r.ipc.after = nil
	return ev
}
