package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/courier-mp/courier/internal/bench"
	"github.com/courier-mp/courier/internal/bench/chart"
)

const plotUsage = `usage: courier plot [-o FILE.svg] [-table] [-median] [-title TEXT] RUN.json...

Draws and tabulates earlier runs without measuring anything: the JSON
documents of courier bench -json and of bench/mpi/p2p.c and coll.c -json
(schema courier-bench/1), in the order given.

  -o FILE.svg   draw the runs to FILE.svg: one-way latency and bandwidth
                against message size, and each collective's time per call
                against size, log-log axes, one line per run (dashed for
                runs of other programs than courier), the runs' labels in
                the legends (default: none)
  -table        print Markdown tables to standard output: per size, each
                run's figure, then for every courier run and every other
                run the ratio courier ÷ other (for latency and time per
                call below 1 is faster; for bandwidth above 1 is faster)
                (default false)
  -median       runs with the same label are one line and one column: per
                size, the median of their figures (for an even count the
                mean of the two middle ones), as for rounds of one
                system; without it, a label seen before gets " (2)",
                " (3)" appended (default false)
  -title TEXT   put TEXT before each panel's title (default: none)

At least one of -o and -table is needed.

Exit status: 0 on success (and for -h), 2 for a usage error, 1 if a file
cannot be read or written.
`

// plot is courier plot.
func (a *app) plot(args []string) int {
	fs := flag.NewFlagSet("plot", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {}
	out := fs.String("o", "", "draw the runs to `FILE.svg`")
	table := fs.Bool("table", false, "print Markdown tables of the runs and the ratios")
	median := fs.Bool("median", false, "one line per label, the median of its runs")
	title := fs.String("title", "", "text before each panel's title")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(a.stdout, plotUsage)
			return 0
		}
		io.WriteString(a.stderr, plotUsage)
		return 2
	}
	if fs.NArg() == 0 || *out == "" && !*table {
		fmt.Fprintln(a.stderr, "courier plot: want JSON files, and -o or -table")
		io.WriteString(a.stderr, plotUsage)
		return 2
	}
	var docs []*bench.Document
	for _, path := range fs.Args() {
		d, err := bench.ReadFile(path)
		if err != nil {
			fmt.Fprintln(a.stderr, "courier plot:", err)
			return 1
		}
		docs = append(docs, d)
	}
	series := bench.Combine(docs, *median)
	if *table {
		if err := bench.Table(a.stdout, series); err != nil {
			fmt.Fprintln(a.stderr, "courier plot:", err)
			return 1
		}
	}
	if *out != "" {
		if err := writeFile(*out, func(w io.Writer) error { return chart.SVG(w, *title, series) }); err != nil {
			fmt.Fprintln(a.stderr, "courier plot:", err)
			return 1
		}
	}
	return 0
}
