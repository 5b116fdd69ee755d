package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/courier-mp/courier/internal/trace"
)

const traceUsage = `usage: courier trace [-o MERGED.json] [-svg TIMELINE.svg] [-from D] [-to D] [-title TEXT] TRACE.json...

Merges the timelines that the ranks of a job wrote (COURIER_TRACE=FILE:
one file per rank, FILE.rank<r>.json) onto one clock, and draws them.
Files that courier trace -o wrote may be given again, beside others.

  -o MERGED.json     write the merged trace: Chrome trace-event JSON, for
                     Perfetto (ui.perfetto.dev) or chrome://tracing; one
                     process per rank, one thread per track (the rank's
                     CPU calls, "host", and each CUDA stream it ordered
                     work on), lanes for the operations in flight together
  -svg TIMELINE.svg  draw the timeline: one row per rank and track, each
                     operation a rectangle coloured by its kind, a time
                     axis, what each one was in its tooltip
  -from D, -to D     draw only the spans that lie wholly between these
                     times (Go durations, 3.35s or 120ms, after the first
                     span's start; default: all of them): a close look
  -title TEXT        the drawing's title (default: the files' names)

At least one of -o and -svg is needed. The ranks' times are put on one
clock by the wall-clock instant each recorded at Init: exact within a host,
as good as the hosts' clock synchronization across hosts (docs/trace.md).

Exit status: 0 on success (and for -h), 2 for a usage error, 1 if a file
cannot be read, is not a courier trace, or cannot be written.
`

// traceCmd is courier trace.
func (a *app) traceCmd(args []string) int {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {}
	out := fs.String("o", "", "write the merged trace to `MERGED.json`")
	svg := fs.String("svg", "", "draw the timeline to `TIMELINE.svg`")
	title := fs.String("title", "", "the drawing's title")
	from := fs.Duration("from", 0, "draw the spans after this time")
	to := fs.Duration("to", 0, "draw the spans before this time (0: the end)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(a.stdout, traceUsage)
			return 0
		}
		io.WriteString(a.stderr, traceUsage)
		return 2
	}
	if *from < 0 || *to < 0 || *to != 0 && *to <= *from {
		fmt.Fprintf(a.stderr, "courier trace: -from %v -to %v is not a window of the timeline\n", *from, *to)
		return 2
	}
	if fs.NArg() == 0 || *out == "" && *svg == "" {
		fmt.Fprintln(a.stderr, "courier trace: want trace files, and -o or -svg")
		io.WriteString(a.stderr, traceUsage)
		return 2
	}
	files := make([]*trace.File, 0, fs.NArg())
	for _, path := range fs.Args() {
		f, err := trace.ReadFile(path)
		if err != nil {
			fmt.Fprintln(a.stderr, "courier trace:", err)
			return 1
		}
		files = append(files, f)
	}
	merged, err := trace.Merge(files...)
	if err != nil {
		fmt.Fprintln(a.stderr, "courier trace:", err)
		return 1
	}
	for _, r := range merged.OtherData.Ranks {
		if r.Dropped > 0 {
			fmt.Fprintf(a.stderr, "courier trace: rank %d dropped its %d oldest spans (it keeps %d): its timeline begins late\n", r.Rank, r.Dropped, r.Capacity)
		}
	}
	if *out != "" {
		var b bytes.Buffer
		if err := json.NewEncoder(&b).Encode(merged); err != nil {
			fmt.Fprintln(a.stderr, "courier trace:", err)
			return 1
		}
		if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
			fmt.Fprintln(a.stderr, "courier trace:", err)
			return 1
		}
	}
	if *svg != "" {
		if *title == "" {
			*title = strings.Join(fs.Args(), " ")
			if fs.NArg() > 4 {
				*title = fmt.Sprintf("%s … (%d files)", fs.Arg(0), fs.NArg())
			}
		}
		drawn := merged
		if *from > 0 || *to > 0 {
			if drawn = window(merged, *from, *to); countSpans(drawn) == 0 {
				fmt.Fprintf(a.stderr, "courier trace: no span lies wholly between %v and %v\n", *from, *to)
				return 1
			}
		}
		var b bytes.Buffer
		drawTimeline(&b, drawn, *title)
		if err := os.WriteFile(*svg, b.Bytes(), 0o644); err != nil {
			fmt.Fprintln(a.stderr, "courier trace:", err)
			return 1
		}
	}
	fmt.Fprintf(a.stdout, "courier trace: %d ranks, %d spans; %s\n", len(merged.OtherData.Ranks), countSpans(merged), merged.OtherData.Clock)
	return 0
}

// window is f with only the spans that lie wholly between from and to (0:
// the end) after the first span's start; the metadata stays.
func window(f *trace.File, from, to time.Duration) *trace.File {
	start := math.Inf(1)
	for _, e := range f.TraceEvents {
		if e.Ph == "X" {
			start = min(start, e.Ts)
		}
	}
	lo, hi := start+float64(from.Microseconds()), math.Inf(1)
	if to > 0 {
		hi = start + float64(to.Microseconds())
	}
	out := *f
	out.TraceEvents = nil
	for _, e := range f.TraceEvents {
		if e.Ph != "X" || e.Ts >= lo && e.Dur != nil && e.Ts+*e.Dur <= hi {
			out.TraceEvents = append(out.TraceEvents, e)
		}
	}
	return &out
}

// countSpans is the number of spans in f.
func countSpans(f *trace.File) int {
	n := 0
	for _, e := range f.TraceEvents {
		if e.Ph == "X" {
			n++
		}
	}
	return n
}
