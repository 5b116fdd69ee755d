package mp

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/trace"
)

// The timeline. With COURIER_TRACE=FILE (or WithTrace), every rank
// records a span for each operation the program calls: the point-to-point
// calls, each collective as one span, the program's own spans (Trace);
// and writes them at Close, in the Chrome trace-event format
// (internal/trace), to its own file (traceFile). The world's recorder is
// shared by the communicators derived from it; they name themselves in
// their spans.
//
// What it costs when off: the message calls test traceOn, one load of a
// package variable and a branch that always goes one way, and a request
// tests its span's number, zero, where it completes. Nothing is
// allocated. When on, a call reads the clock twice and takes the
// recorder's lock twice (docs/benchmarks.md has the figures).

// traceOn is whether any communicator of this process records a trace:
// the one test the message calls make when none does.
var traceOn atomic.Bool

// traceCapacity is how many spans a rank keeps: once it has recorded
// more, each new span takes the place of the oldest, and the file says
// how many were dropped. 136 bytes each (18 MiB in all). A variable for
// the tests.
var traceCapacity = 1 << 17

// traceEnv names the variable of the trace's file.
const traceEnv = "COURIER_TRACE"

// traceFile is the file of rank's trace for COURIER_TRACE=spec: spec
// with every "%r" replaced by the rank when it has one; otherwise spec,
// less a final ".json", then ".rank<r>.json" (trace and trace.json both
// give trace.rank0.json, trace.rank1.json, …).
func traceFile(spec string, rank int) string {
	r := strconv.Itoa(rank)
	if strings.Contains(spec, "%r") {
		return strings.ReplaceAll(spec, "%r", r)
	}
	return strings.TrimSuffix(spec, ".json") + ".rank" + r + ".json"
}

// traceKind is what a span is of.
type traceKind uint8

const (
	tkSend traceKind = iota + 1
	tkRecv
	tkIsend
	tkIrecv
	tkSendrecv
	tkIsendOnStream
	tkIrecvOnStream
	tkSendValue
	tkRecvValue
	tkColl // a collective: call says which (report.go's collCall)
	tkUser // the program's own (Comm.Trace)
)

// traceNames are the spans' names, as the program calls the operations.
var traceNames = [...]string{tkSend: "Send", tkRecv: "Recv", tkIsend: "Isend", tkIrecv: "Irecv",
	tkSendrecv: "Sendrecv", tkIsendOnStream: "IsendOnStream", tkIrecvOnStream: "IrecvOnStream",
	tkSendValue: "SendValue", tkRecvValue: "RecvValue"}

// receives reports whether spans of k receive a message into a buffer
// whose bytes the status gives (peer2 for Sendrecv).
func (k traceKind) receives() bool {
	return k == tkRecv || k == tkIrecv || k == tkIrecvOnStream || k == tkRecvValue
}

// The flags of a span.
const (
	tfAnySource = 1 << iota
	tfAnyTag
)

// traceEvent is one recorded span. Times are nanoseconds after the
// recorder's origin.
type traceEvent struct {
	seq           uint64 // its number, from 1
	post          int64  // the call
	run           int64  // when it began to run, where that is later (a collective's turn); 0: unknown
	end           int64  // when courier saw it complete; 0: not yet
	pc            uintptr
	bytes, bytes2 int64 // a message's bytes (a receive's: its buffer's, then what came); a collective's send and receive buffers'; Sendrecv's receive half
	name          string
	comm          *Comm // nil for the world
	err           error
	gpu           *gpuTimes // a span on a stream's track timed on the GPU (tracegpu.go); nil: none
	peer, tag     int32     // a collective's root in peer (-1: none)
	peer2, tag2   int32     // Sendrecv's source and receive tag
	call          uint32
	track         uint16 // 0: the host; k: stream k
	elem          uint8  // the receive buffer's element size
	kind          traceKind
	flags         uint8
}

// recorder keeps a rank's spans in a ring and writes them to its file.
type recorder struct {
	origin      time.Time
	path        string
	rank        int
	size        int
	host        string
	pid         int
	capacity    int
	writeMu     sync.Mutex // one write at a time; the file, closed
	file        *os.File
	closed      bool
	mu          sync.Mutex // the ring, the streams, stopped
	stopped     bool       // the last write has begun: no span is recorded any more
	ring        []traceEvent
	seq         uint64    // spans recorded so far
	streams     []uintptr // the handle of stream track k+1
	streamIDs   map[uintptr]uint16
	gpuMu       sync.Mutex                 // the anchors
	anchors     map[cuda.Device]*gpuAnchor // per device, nil where it cannot time (tracegpu.go)
	gpuReleased bool                       // the anchors are destroyed: none is made any more
}

// openTrace creates the trace file of rank for spec (COURIER_TRACE) and
// starts its recorder; ts 0 is now. The file is created at once, so that
// a path that cannot be written fails Init before the ranks meet.
func openTrace(spec string, rank, size int) (*recorder, error) {
	path := traceFile(spec, rank)
	f, err := os.Create(path)
	if err != nil {
		return nil, invalidf("%s=%q: cannot create rank %d's trace file: %v", traceEnv, spec, rank, err)
	}
	host, _ := os.Hostname()
	traceOn.Store(true)
	return &recorder{
		origin: time.Now(), path: path, rank: rank, size: size, host: host, pid: os.Getpid(),
		capacity: max(traceCapacity, 1), file: f, streamIDs: map[uintptr]uint16{},
	}, nil
}

// discard closes and removes the file of a recorder whose Init failed.
func (r *recorder) discard() {
	r.file.Close()
	os.Remove(r.path)
}

// now is the time since the origin.
func (r *recorder) now() int64 { return int64(time.Since(r.origin)) }

// begin records e, posted now, and returns its number; 0 once the last
// write has begun.
func (r *recorder) begin(e traceEvent) uint64 {
	e.post = r.now()
	var old *gpuTimes
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return 0
	}
	r.seq++
	e.seq = r.seq
	if len(r.ring) < r.capacity {
		r.ring = append(r.ring, e)
	} else {
		i := (e.seq - 1) % uint64(r.capacity)
		old = r.ring[i].gpu
		r.ring[i] = e
	}
	r.mu.Unlock()
	if old != nil {
		old.destroy()
	}
	return e.seq
}

// slot is span seq's place in the ring, nil once a newer one took it;
// r.mu is held.
func (r *recorder) slot(seq uint64) *traceEvent {
	i := (seq - 1) % uint64(r.capacity)
	if i < uint64(len(r.ring)) && r.ring[i].seq == seq {
		return &r.ring[i]
	}
	return nil
}

// streamTrack is the track of the stream whose handle is h, numbered
// from 1 in the order of first use; r.mu is held.
func (r *recorder) streamTrack(h uintptr) uint16 {
	if k, ok := r.streamIDs[h]; ok {
		return k
	}
	r.streams = append(r.streams, h)
	k := uint16(min(len(r.streams), 1<<16-1))
	r.streamIDs[h] = k
	return k
}

// tracePost begins the span of a point-to-point call of kind on b with
// peer and tag, made at pc; 0 when c records none.
func (c *Comm) tracePost(kind traceKind, b backend.Buffer, peer, tag int, pc uintptr) uint64 {
	if c == nil || c.tr == nil {
		return 0
	}
	e := traceEvent{kind: kind, pc: pc, bytes: b.Len(), peer: int32(peer), tag: int32(tag), elem: uint8(b.Type.Size()), comm: c.traceComm()}
	if peer == AnySource {
		e.flags |= tfAnySource
	}
	if tag == AnyTag {
		e.flags |= tfAnyTag
	}
	return c.tr.begin(e)
}

// traceSendrecv begins the span of a Sendrecv; 0 when c records none.
func (c *Comm) traceSendrecv(send backend.Buffer, dest, sendTag int, recv backend.Buffer, source, recvTag int, pc uintptr) uint64 {
	if c == nil || c.tr == nil {
		return 0
	}
	e := traceEvent{kind: tkSendrecv, pc: pc, bytes: send.Len(), peer: int32(dest), tag: int32(sendTag),
		bytes2: recv.Len(), peer2: int32(source), tag2: int32(recvTag), elem: uint8(recv.Type.Size()), comm: c.traceComm()}
	if source == AnySource {
		e.flags |= tfAnySource
	}
	if recvTag == AnyTag {
		e.flags |= tfAnyTag
	}
	return c.tr.begin(e)
}

// traceColl begins the span of a collective the program called (call as
// collCall says) with co; 0 when c records none.
func (c *Comm) traceColl(call uint32, co *backend.Coll) uint64 {
	if c == nil || c.tr == nil {
		return 0
	}
	e := traceEvent{kind: tkColl, call: call, pc: co.Caller, bytes: co.Send.Len(), bytes2: co.Recv.Len(), peer: -1, comm: c.traceComm()}
	if co.Kind.Rooted() {
		e.peer = int32(co.Root)
	}
	return c.tr.begin(e)
}

// traceComm is what a span says of c: nothing for the world.
func (c *Comm) traceComm() *Comm {
	if c.parent == nil {
		return nil
	}
	return c
}

// traceTurn notes that the operation of span seq begins to run now.
func (c *Comm) traceTurn(seq uint64) {
	r := c.tr
	t := r.now()
	r.mu.Lock()
	if e := r.slot(seq); e != nil {
		e.run = t
	}
	r.mu.Unlock()
}

// traceOnStream puts span seq on the track of stream h.
func (c *Comm) traceOnStream(seq uint64, h uintptr) {
	r := c.tr
	r.mu.Lock()
	if e := r.slot(seq); e != nil {
		e.track = r.streamTrack(h)
	}
	r.mu.Unlock()
}

// traceDone ends span seq now, with err; st is a receive's status (its
// source, tag and count, for a wildcard or a shorter message).
func (c *Comm) traceDone(seq uint64, st Status, err error) {
	r := c.tr
	t := r.now()
	r.mu.Lock()
	if e := r.slot(seq); e != nil && e.end == 0 {
		e.end = max(t, e.post)
		e.err = err
		if err == nil {
			switch {
			case e.kind.receives():
				e.peer, e.tag, e.bytes = int32(st.Source), int32(st.Tag), st.Count*int64(e.elem)
			case e.kind == tkSendrecv:
				e.peer2, e.tag2, e.bytes2 = int32(st.Source), int32(st.Tag), st.Count*int64(e.elem)
			}
		}
	}
	r.mu.Unlock()
}

// traceEnd ends span (when it is not 0) with err, and returns err.
func (c *Comm) traceEnd(span uint64, err error) error {
	if span != 0 {
		c.traceDone(span, Status{}, err)
	}
	return err
}

// traceRequest ties span seq to q: its completion ends the span, or, for
// a request that failed at its call, the span ends now.
func (c *Comm) traceRequest(q *Request, seq uint64) {
	if q.done {
		c.traceDone(seq, Status{}, q.err)
		return
	}
	q.tseq = seq
}

// snapshot is the spans kept, oldest first, how many were dropped, and
// the time of the snapshot; final stops the recording.
func (r *recorder) snapshot(final bool) (events []traceEvent, dropped uint64, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = r.stopped || final
	at = r.now()
	events = make([]traceEvent, 0, len(r.ring))
	if r.seq > uint64(len(r.ring)) { // wrapped: the oldest is the next to go
		i := int(r.seq % uint64(r.capacity))
		events = append(events, r.ring[i:]...)
		events = append(events, r.ring[:i]...)
	} else {
		events = append(events, r.ring...)
	}
	return events, r.seq - uint64(len(r.ring)), at
}

// write writes the spans recorded so far to the file, replacing what an
// earlier write left there; final closes the file after it.
func (r *recorder) write(backendName string, final bool) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	if r.closed {
		return nil
	}
	events, dropped, at := r.snapshot(final)
	r.mu.Lock()
	streams := append([]uintptr(nil), r.streams...)
	r.mu.Unlock()
	tracks := make([]string, 1+len(streams))
	tracks[0] = trace.HostTrack
	for k := range streams {
		tracks[k+1] = "stream " + strconv.Itoa(k+1)
	}
	spans := make([]trace.Span, 0, len(events))
	for i := range events {
		spans = append(spans, r.span(&events[i], tracks, streams, at))
	}
	meta := trace.Meta{
		Format: trace.FormatName, Version: trace.Version, OriginUnixNano: r.origin.UnixNano(), Clock: trace.ClockSingleRank,
		Ranks: []trace.RankInfo{{Rank: r.rank, Size: r.size, Host: r.host, PID: r.pid, Backend: backendName,
			InitUnixNano: r.origin.UnixNano(), Spans: len(spans), Dropped: dropped, Capacity: r.capacity}},
	}
	err := r.put(trace.Build(meta, r.rank, tracks, spans))
	if final {
		r.closed = true
		err = errors.Join(err, r.file.Close())
		for _, e := range events {
			if e.gpu != nil {
				e.gpu.destroy()
			}
		}
		r.releaseGPU()
	}
	if err != nil {
		return fmt.Errorf("writing the trace to %s: %w", r.path, err)
	}
	return nil
}

// put writes f over the file's content.
func (r *recorder) put(f *trace.File) error {
	if err := r.file.Truncate(0); err != nil {
		return err
	}
	if _, err := r.file.Seek(0, 0); err != nil {
		return err
	}
	w := bufio.NewWriterSize(r.file, 1<<16)
	if err := json.NewEncoder(w).Encode(f); err != nil {
		return err
	}
	return w.Flush()
}

// span is e as the file shows it; a span still pending ends at.
func (r *recorder) span(e *traceEvent, tracks []string, streams []uintptr, at int64) trace.Span {
	s := trace.Span{Track: tracks[min(int(e.track), len(tracks)-1)], Start: e.post, End: e.end, Cat: trace.CatP2P}
	a := &s.Args
	if e.end == 0 {
		s.End, a.Pending = max(at, e.post), true
	}
	switch e.kind {
	case tkColl:
		s.Name, s.Cat = collCallName(e.call), trace.CatColl
		a.Bytes, a.RecvBytes = new(e.bytes), new(e.bytes2)
		if e.peer >= 0 {
			a.Root = new(int(e.peer))
		}
	case tkUser:
		s.Name, s.Cat = e.name, trace.CatUser
	default:
		s.Name = traceNames[e.kind]
		a.Peer, a.Tag, a.Bytes = new(int(e.peer)), new(int(e.tag)), new(e.bytes)
		a.AnySource, a.AnyTag = e.flags&tfAnySource != 0, e.flags&tfAnyTag != 0
		if e.kind == tkSendrecv {
			a.Source, a.RecvTag, a.RecvBytes = new(int(e.peer2)), new(int(e.tag2)), new(e.bytes2)
		}
		if e.kind.receives() && a.Pending && a.AnySource {
			a.Peer = nil // not known yet
		}
	}
	if e.run > e.post {
		a.StartedUs = new(trace.Micros(e.run))
	}
	if e.gpu != nil {
		if start, end, ok := r.gpuSpan(e.gpu); ok {
			a.Clock, a.PostedUs = "gpu", new(trace.Micros(s.Start))
			if !a.Pending {
				a.CompletedUs = new(trace.Micros(s.End))
			}
			s.Start, s.End = start, end
		}
	}
	if e.track > 0 && int(e.track) <= len(streams) {
		a.Stream = fmt.Sprintf("%#x", streams[e.track-1])
	}
	if e.comm != nil {
		a.Comm = e.comm.name
	}
	if file, line, fn, ok := callerOf(e.pc); ok {
		a.Caller, a.Func = file+":"+strconv.Itoa(line), fn
	}
	if e.err != nil {
		a.Error = e.err.Error()
	}
	return s
}
