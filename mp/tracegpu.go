package mp

import "github.com/courier-mp/courier/cuda"

// GPU times on the timeline. A span on a stream's track (IsendOnStream,
// IrecvOnStream, the …OnStream collectives, TraceOnStream) records two
// CUDA events on its stream: one before the operation is queued there and
// one after, so that their times are when the stream reached the
// operation and when the operation was done on the GPU. At write time
// each span's start is its first event's time after an anchor, an event
// of the device recorded and waited for (on a stream of its own) when the
// rank first timed work there, whose CPU time was read as it fired; the
// span lasts the time between its two events. So GPU times line up with
// the CPU's to within that one wait's latency (microseconds), and the
// start of a span is as precise as CUDA's elapsed time in milliseconds,
// a float32, allows at its distance from the anchor: about 1 µs 10 s
// later, 10 µs 100 s later. A span whose events have not fired when the
// file is written keeps its CPU times. Nothing of this runs unless the
// rank records a timeline.

// gpuTimes are the events that time a span on its stream's GPU.
type gpuTimes struct {
	s          *cuda.Stream // where the end is recorded (TraceOnStream's End)
	start, end *cuda.Event
	ended      bool // end recorded
}

// destroy releases the events.
func (g *gpuTimes) destroy() {
	g.start.Destroy()
	g.end.Destroy()
}

// gpuAnchor ties a device's event times to the recorder's clock: its
// event fired at at.
type gpuAnchor struct {
	ev *cuda.Event
	at int64
}

// anchor returns the anchor of device d, made now if it has none; nil
// when the device cannot time (no CUDA), which is then remembered.
func (r *recorder) anchor(d cuda.Device) *gpuAnchor {
	r.gpuMu.Lock()
	defer r.gpuMu.Unlock()
	if a, ok := r.anchors[d]; ok || r.gpuReleased {
		return a
	}
	var a *gpuAnchor
	if ev, err := cuda.NewEvent(d); err == nil {
		if s, err := cuda.NewStream(d); err == nil {
			if ev.Record(s) == nil && ev.Synchronize() == nil {
				a = &gpuAnchor{ev: ev, at: r.now()}
			}
			s.Destroy()
		}
		if a == nil {
			ev.Destroy()
		}
	}
	if r.anchors == nil {
		r.anchors = map[cuda.Device]*gpuAnchor{}
	}
	r.anchors[d] = a
	return a
}

// traceStreamStart records span seq's first event on s now, when the
// span is still kept and s's device can time.
func (c *Comm) traceStreamStart(seq uint64, s *cuda.Stream) {
	r := c.tr
	if r.anchor(s.Device()) == nil {
		return
	}
	start, err := cuda.NewEvent(s.Device())
	if err != nil {
		return
	}
	end, err := cuda.NewEvent(s.Device())
	if err != nil {
		start.Destroy()
		return
	}
	g := &gpuTimes{s: s, start: start, end: end}
	if start.Record(s) != nil {
		g.destroy()
		return
	}
	r.mu.Lock()
	e := r.slot(seq)
	if e != nil {
		e.gpu = g
	}
	r.mu.Unlock()
	if e == nil {
		g.destroy()
	}
}

// traceStreamEnd records span seq's second event on its stream now, once.
func (c *Comm) traceStreamEnd(seq uint64) {
	r := c.tr
	r.mu.Lock()
	var g *gpuTimes
	if e := r.slot(seq); e != nil && e.gpu != nil && !e.gpu.ended {
		g = e.gpu
		g.ended = true
	}
	r.mu.Unlock()
	if g != nil {
		g.end.Record(g.s) // a failure leaves the end unfired: the span keeps its CPU times
	}
}

// gpuSpan returns the GPU times of g, in the recorder's clock, when both
// its events have fired.
func (r *recorder) gpuSpan(g *gpuTimes) (start, end int64, ok bool) {
	r.mu.Lock()
	ended := g.ended
	r.mu.Unlock()
	if !ended {
		return 0, 0, false
	}
	if done, err := g.end.Query(); !done || err != nil {
		return 0, 0, false
	}
	r.gpuMu.Lock()
	a := r.anchors[g.start.Device()]
	r.gpuMu.Unlock()
	if a == nil {
		return 0, 0, false
	}
	from, err := cuda.Elapsed(a.ev, g.start)
	if err != nil {
		return 0, 0, false
	}
	d, err := cuda.Elapsed(g.start, g.end)
	if err != nil {
		return 0, 0, false
	}
	start = a.at + int64(from)
	return start, start + max(int64(d), 0), true
}

// releaseGPU destroys the anchors' events, after the last write.
func (r *recorder) releaseGPU() {
	r.gpuMu.Lock()
	defer r.gpuMu.Unlock()
	for _, a := range r.anchors {
		if a != nil {
			a.ev.Destroy()
		}
	}
	r.anchors, r.gpuReleased = nil, true
}

// TraceOnStream begins a span named name on the track of stream s, timed
// on the GPU: it covers the work queued on s between this call and the
// span's End (a kernel, say), from when s reaches that work to when it is
// done, as CUDA events on s measure it; the span also keeps its CPU
// times (this call and End). Neither call waits for the GPU. End must be
// called from the goroutine that queues work on s after it, or the span
// covers what another goroutine queued meanwhile.
//
// When c records no timeline, or s is nil or destroyed, TraceOnStream
// does nothing and allocates nothing, as Trace; where CUDA cannot time
// (no GPU), the span has only its CPU times.
//
//go:noinline
func (c *Comm) TraceOnStream(name string, s *cuda.Stream) TraceSpan {
	if !traceOn.Load() || c == nil || c.tr == nil || s == nil || s.Handle() == 0 {
		return TraceSpan{}
	}
	e := traceEvent{kind: tkUser, name: name, pc: callerPC(), peer: -1, comm: c.traceComm()}
	seq := c.tr.begin(e)
	c.traceOnStream(seq, s.Handle())
	c.traceStreamStart(seq, s)
	return TraceSpan{c: c, seq: seq}
}
