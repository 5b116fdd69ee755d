package launch

import (
	"bytes"
	"io"
	"sync"
)

// maxLine bounds how much of one unterminated line a rank's prefixer holds.
// A longer line is written in pieces of this size, each on a line of its
// own, so that a program that never writes a newline cannot grow the
// launcher without bound.
const maxLine = 1 << 20

// output serializes everything written to the launcher's stdout and stderr:
// one lock for both, because they are often the same terminal (or, in
// tests, the same buffer), and a line must never be split by another.
type output struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
}

// write writes p to w as one call under the lock. Errors are dropped: a
// launcher that cannot write its output should not make the ranks fail
// (their pipes keep draining), and Go already stops a process whose stdout
// or stderr is a closed pipe.
func (o *output) write(w io.Writer, p []byte) {
	o.mu.Lock()
	w.Write(p)
	o.mu.Unlock()
}

// lockedWriter passes writes through to dst under the output lock.
type lockedWriter struct {
	o   *output
	dst io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.o.write(w.dst, p)
	return len(p), nil
}

// lineWriter prefixes every line written to it and forwards whole lines to
// dst, many at a time but never part of one. A trailing partial line waits
// for the rest of it, or for Flush. One goroutine writes to a lineWriter at
// a time (exec.Cmd's copier, then Flush after Wait).
type lineWriter struct {
	o       *output
	dst     io.Writer
	prefix  []byte
	partial []byte // the unterminated end of what was written so far
	scratch []byte
}

func newLineWriter(o *output, dst io.Writer, prefix string) *lineWriter {
	return &lineWriter{o: o, dst: dst, prefix: []byte(prefix)}
}

// Write implements io.Writer. It never fails.
func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	last := bytes.LastIndexByte(p, '\n')
	if last < 0 {
		w.partial = append(w.partial, p...)
		w.spill()
		return n, nil
	}
	done, rest := p[:last+1], p[last+1:]
	out := w.scratch[:0]
	for len(done) > 0 {
		i := bytes.IndexByte(done, '\n')
		out = append(out, w.prefix...)
		out = append(out, w.partial...)
		w.partial = w.partial[:0]
		out = append(out, done[:i+1]...)
		done = done[i+1:]
	}
	w.o.write(w.dst, out)
	if cap(out) <= 2*maxLine {
		w.scratch = out[:0]
	} else {
		w.scratch = nil
	}
	w.partial = append(w.partial, rest...)
	w.spill()
	return n, nil
}

// spill writes out the pending partial line in maxLine pieces while it is
// longer than maxLine.
func (w *lineWriter) spill() {
	for len(w.partial) > maxLine {
		w.emit(w.partial[:maxLine])
		w.partial = append(w.partial[:0], w.partial[maxLine:]...)
	}
}

// emit writes prefix, line and a newline as one write.
func (w *lineWriter) emit(line []byte) {
	out := make([]byte, 0, len(w.prefix)+len(line)+1)
	out = append(out, w.prefix...)
	out = append(out, line...)
	out = append(out, '\n')
	w.o.write(w.dst, out)
}

// Flush writes a pending partial line, with a newline added.
func (w *lineWriter) Flush() {
	if len(w.partial) > 0 {
		w.emit(w.partial)
		w.partial = w.partial[:0]
	}
}
