package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progressLine shows, on one line of a terminal that it rewrites, which
// figure a long benchmark is measuring and how long the run has taken.
type progressLine struct {
	w     io.Writer
	start time.Time
	shown bool
}

// newProgress returns the progress line of a run whose messages go to w,
// or nil when w is not a terminal (a file, a pipe, a test's buffer): then
// nothing is shown.
func newProgress(w io.Writer) *progressLine {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	return &progressLine{w: w, start: time.Now()}
}

// show replaces the line with what is being measured.
func (p *progressLine) show(what string, figure, figures int) {
	if p == nil {
		return
	}
	fmt.Fprintf(p.w, "\r\x1b[Kcourier bench: measuring %s, figure %d of %d (%v so far)",
		what, figure, figures, time.Since(p.start).Round(time.Second))
	p.shown = true
}

// clear erases the line, before a row of the table is printed and at
// the end.
func (p *progressLine) clear() {
	if p == nil || !p.shown {
		return
	}
	io.WriteString(p.w, "\r\x1b[K")
	p.shown = false
}

// hook is show as bench.Config.Progress takes it; nil when p is.
func (p *progressLine) hook() func(string, int, int) {
	if p == nil {
		return nil
	}
	return p.show
}
