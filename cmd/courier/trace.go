package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/courier-mp/courier/internal/trace"
)

const traceUsage = `usage: courier trace [-o MERGED.json] [-svg TIMELINE.svg] [-title TEXT] TRACE.json...

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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(a.stdout, traceUsage)
			return 0
		}
		io.WriteString(a.stderr, traceUsage)
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
		var b bytes.Buffer
		drawTimeline(&b, merged, *title)
		if err := os.WriteFile(*svg, b.Bytes(), 0o644); err != nil {
			fmt.Fprintln(a.stderr, "courier trace:", err)
			return 1
		}
	}
	spans := 0
	for _, e := range merged.TraceEvents {
		if e.Ph == "X" {
			spans++
		}
	}
	fmt.Fprintf(a.stdout, "courier trace: %d ranks, %d spans; %s\n", len(merged.OtherData.Ranks), spans, merged.OtherData.Clock)
	return 0
}
