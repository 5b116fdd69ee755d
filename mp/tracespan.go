package mp

// WithTrace records the communicator's timeline and writes it at Close
// to file, as COURIER_TRACE=file does, overriding that variable: every
// "%r" in file is replaced by the rank, and without one the file is file
// less a final ".json", then ".rank<r>.json". An empty file records
// nothing, whatever COURIER_TRACE says. See Comm.Trace and docs/trace.md.
func WithTrace(file string) Option {
	return func(c *config) { c.trace, c.traceSet = file, true }
}

// Tracing reports whether c records a timeline (COURIER_TRACE or
// WithTrace was set when the world was made), for a program that would
// spend time naming its spans.
func (c *Comm) Tracing() bool { return c != nil && c.tr != nil }

// TraceSpan is a span of the program's own on its rank's timeline, begun
// by Comm.Trace and ended by End. It is a small value: keep it in a
// variable, or defer its End. The zero TraceSpan, which Trace returns
// when the communicator records nothing, is valid and its End does
// nothing.
type TraceSpan struct {
	c   *Comm
	seq uint64
}

// Trace begins a span named name on the timeline of c's rank, on its host
// track beside the operations the rank calls, and returns it; its End
// ends it. Spans may nest and overlap, and may be ended from another
// goroutine. The span records where Trace was called.
//
// When c records no timeline (neither COURIER_TRACE nor WithTrace), Trace
// returns at once, allocating nothing, and End does nothing: the calls
// may stay in a program's hot loop. When it does, a span costs what an
// operation's does (two clock reads and two short locks); it is kept in
// the rank's bounded ring of spans and written at Close.
//
//go:noinline
func (c *Comm) Trace(name string) TraceSpan {
	if !traceOn.Load() || c == nil || c.tr == nil {
		return TraceSpan{}
	}
	e := traceEvent{kind: tkUser, name: name, pc: callerPC(), peer: -1, comm: c.traceComm()}
	return TraceSpan{c: c, seq: c.tr.begin(e)}
}

// End ends the span now. Only its first End counts; End of the zero
// TraceSpan does nothing.
func (s TraceSpan) End() {
	if s.seq != 0 {
		s.c.traceStreamEnd(s.seq) // TraceOnStream's
		s.c.traceDone(s.seq, Status{}, nil)
	}
}
