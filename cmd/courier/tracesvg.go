package main

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/courier-mp/courier/internal/trace"
)

// The drawing of courier trace -svg, in pixels.
const (
	svgWidth   = 1200.0
	svgLabels  = 150.0 // the column of the rows' names
	svgRight   = 20.0
	svgTop     = 58.0 // the title and the time axis
	svgLaneH   = 14.0
	svgRowPad  = 4.0
	svgLegendH = 34.0
)

// spanKinds are the colours of the spans, by what they are, in the
// legend's order.
var spanKinds = []struct{ name, fill string }{
	{"send", "#4e79a7"},
	{"receive", "#59a14f"},
	{"send and receive", "#76b7b2"},
	{"collective", "#f28e2b"},
	{"the program's", "#b07aa1"},
}

// spanKind is the index in spanKinds of e's colour.
func spanKind(e trace.Event) int {
	switch {
	case e.Cat == trace.CatColl:
		return 3
	case e.Cat == trace.CatUser:
		return 4
	case e.Name == "Sendrecv":
		return 2
	case strings.Contains(e.Name, "Recv") || strings.Contains(e.Name, "recv"):
		return 1
	case e.Cat == trace.CatP2P:
		return 0
	}
	return 4
}

// timelineRow is one row of the drawing: a rank's track, its lanes and
// spans.
type timelineRow struct {
	rank  int
	track string
	tid   int // the lowest thread of the track, for the rows' order
	lanes int
	spans []trace.Event
}

// timelineRows groups the spans of f by rank and track, in the order of
// the ranks and of their threads; a track named in the metadata with no
// span still has its row.
func timelineRows(f *trace.File) []*timelineRow {
	type key struct {
		rank  int
		track string
	}
	rows := map[key]*timelineRow{}
	row := func(k key, tid int) *timelineRow {
		r, ok := rows[k]
		if !ok {
			r = &timelineRow{rank: k.rank, track: k.track, tid: tid, lanes: 1}
			rows[k] = r
		}
		r.tid = min(r.tid, tid)
		return r
	}
	for _, e := range f.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "thread_name" && e.Args != nil:
			track, _, _ := strings.Cut(e.Args.Name, " +")
			row(key{e.Pid, track}, e.Tid)
		case e.Ph == "X":
			track, lane := trace.HostTrack, 0
			if e.Args != nil && e.Args.Track != "" {
				track, lane = e.Args.Track, max(e.Args.Lane, 0)
			}
			r := row(key{e.Pid, track}, e.Tid-lane)
			r.lanes = max(r.lanes, lane+1)
			r.spans = append(r.spans, e)
		}
	}
	for _, ri := range f.OtherData.Ranks { // a rank with no thread at all still has a row
		if !slices.ContainsFunc(slices.Collect(maps.Keys(rows)), func(k key) bool { return k.rank == ri.Rank }) {
			row(key{ri.Rank, trace.HostTrack}, 0)
		}
	}
	out := make([]*timelineRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *timelineRow) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.tid, b.tid), cmp.Compare(a.track, b.track))
	})
	return out
}

// drawTimeline writes f as an SVG timeline titled title: a row per rank
// and track (its lanes stacked in it), each span a rectangle coloured by
// its kind with what it was in its tooltip, a time axis with ticks along
// the top, and a legend.
func drawTimeline(w io.Writer, f *trace.File, title string) {
	rows := timelineRows(f)
	t0, t1 := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		for _, e := range r.spans {
			t0, t1 = min(t0, e.Ts), max(t1, e.Ts+*e.Dur)
		}
	}
	if t0 > t1 { // no span
		t0, t1 = 0, 1
	}
	if t1-t0 < 1e-3 {
		t1 = t0 + 1e-3
	}
	plotW := svgWidth - svgLabels - svgRight
	x := func(t float64) float64 { return svgLabels + (t-t0)/(t1-t0)*plotW }
	height := svgTop
	for _, r := range rows {
		height += float64(r.lanes)*svgLaneH + 2*svgRowPad
	}
	plotBottom := height
	height += svgLegendH

	b := &strings.Builder{}
	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="11">`+"\n",
		num(svgWidth), num(height), num(svgWidth), num(height))
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%s" y="16" font-size="13" font-weight="bold">%s</text>`+"\n", num(svgLabels), esc(title))

	// The axis: ticks at a round step, labelled in one unit.
	step := niceStep((t1 - t0) / 8)
	unit, div := "µs", 1.0
	switch {
	case t1 >= 1e6:
		unit, div = "s", 1e6
	case t1 >= 1e3:
		unit, div = "ms", 1e3
	}
	fmt.Fprintf(b, `<g class="axis" stroke="#999">`+"\n")
	fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(svgLabels), num(svgTop-4), num(svgLabels+plotW), num(svgTop-4))
	for t := math.Ceil(t0/step) * step; t <= t1+step*1e-9; t += step {
		xt := x(t)
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#ddd"/>`+"\n", num(xt), num(svgTop-4), num(xt), num(plotBottom))
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle" stroke="none" fill="#333">%s</text>`+"\n",
			num(xt), num(svgTop-10), esc(strconv.FormatFloat(t/div, 'f', -1, 64)+" "+unit))
	}
	fmt.Fprintf(b, "</g>\n")

	y := svgTop
	for i, r := range rows {
		h := float64(r.lanes)*svgLaneH + 2*svgRowPad
		fmt.Fprintf(b, `<g class="row" data-rank="%d" data-track="%s">`+"\n", r.rank, esc(r.track))
		if i%2 == 0 {
			fmt.Fprintf(b, `<rect x="0" y="%s" width="%s" height="%s" fill="#f4f4f4"/>`+"\n", num(y), num(svgWidth), num(h))
		}
		fmt.Fprintf(b, `<text x="6" y="%s">rank %d · %s</text>`+"\n", num(y+svgRowPad+svgLaneH-3), r.rank, esc(r.track))
		for _, e := range r.spans {
			lane := 0
			if e.Args != nil {
				lane = max(e.Args.Lane, 0)
			}
			x0, x1 := x(e.Ts), x(e.Ts+*e.Dur)
			k := spanKinds[spanKind(e)]
			extra := ""
			if e.Args != nil && e.Args.Error != "" {
				extra = ` stroke="#d62728" stroke-width="1.5"`
			} else if e.Args != nil && e.Args.Pending {
				extra = ` stroke="#333" stroke-dasharray="2,2" fill-opacity="0.5"`
			}
			fmt.Fprintf(b, `<rect class="span" x="%s" y="%s" width="%s" height="%s" fill="%s"%s><title>%s</title></rect>`+"\n",
				num(x0), num(y+svgRowPad+float64(lane)*svgLaneH+1), num(max(x1-x0, 0.5)), num(svgLaneH-2), k.fill, extra, esc(spanTitle(e)))
		}
		fmt.Fprintf(b, "</g>\n")
		y += h
	}

	lx := svgLabels
	ly := plotBottom + 20
	fmt.Fprintf(b, `<g class="legend">`+"\n")
	for _, k := range spanKinds {
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="12" height="10" fill="%s"/><text x="%s" y="%s">%s</text>`+"\n",
			num(lx), num(ly-9), k.fill, num(lx+16), num(ly), esc(k.name))
		lx += 30 + 7*float64(len(k.name))
	}
	fmt.Fprintf(b, `<text x="%s" y="%s" fill="#555">red outline: failed; dashed: still pending when written</text>`+"\n", num(lx), num(ly))
	fmt.Fprintf(b, "</g>\n</svg>\n")
	io.WriteString(w, b.String())
}

// spanTitle is the tooltip of a span: what it was, how long, when, and
// where the program called it.
func spanTitle(e trace.Event) string {
	var b strings.Builder
	b.WriteString(e.Name)
	a := e.Args
	if a == nil {
		a = &trace.Args{}
	}
	if a.Peer != nil {
		verb := " to"
		if spanKind(e) == 1 {
			verb = " from"
		}
		fmt.Fprintf(&b, "%s rank %d", verb, *a.Peer)
	}
	if a.Source != nil {
		fmt.Fprintf(&b, ", from rank %d", *a.Source)
	}
	if a.Root != nil {
		fmt.Fprintf(&b, ", root %d", *a.Root)
	}
	if a.Tag != nil {
		fmt.Fprintf(&b, ", tag %d", *a.Tag)
	}
	if a.Bytes != nil {
		fmt.Fprintf(&b, ", %d B", *a.Bytes)
	}
	if a.Comm != "" {
		fmt.Fprintf(&b, ", on %s", a.Comm)
	}
	fmt.Fprintf(&b, "\n%s, at %s", micros(*e.Dur), micros(e.Ts))
	if a.Caller != "" {
		fmt.Fprintf(&b, "\ncalled at %s", filepath.Base(a.Caller))
		if a.Func != "" {
			fmt.Fprintf(&b, " in %s", a.Func)
		}
	}
	if a.Pending {
		b.WriteString("\nstill pending")
	}
	if a.Error != "" {
		fmt.Fprintf(&b, "\nfailed: %s", a.Error)
	}
	return b.String()
}

// micros formats a time in microseconds in a unit that suits it.
func micros(us float64) string {
	switch {
	case us >= 1e6:
		return strconv.FormatFloat(us/1e6, 'f', 3, 64) + " s"
	case us >= 1e3:
		return strconv.FormatFloat(us/1e3, 'f', 3, 64) + " ms"
	}
	return strconv.FormatFloat(us, 'f', 3, 64) + " µs"
}

// niceStep is the round step (1, 2 or 5 times a power of ten) nearest
// above about.
func niceStep(about float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(about)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= about {
			return m * p
		}
	}
	return 10 * p
}

// num formats a coordinate.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// esc escapes text for XML.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
