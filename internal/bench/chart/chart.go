// Package chart draws benchmark series (bench.Series) as an SVG file:
// one panel for one-way latency against message size, one for bandwidth
// against size, and one per collective for the time per call against
// size; log-log axes; one line per series, the same colour and mark for a
// series in every panel, the series' labels in each panel's legend.
package chart

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/courier-mp/courier/internal/bench"
)

// panel is one plot: a title, a y axis, and one set of points per series.
type panel struct {
	title, ylabel string
	get           func(bench.Series) map[int]float64
}

// Panel size and layout.
const (
	panelWidth  = 13 * vg.Centimeter
	panelHeight = 10 * vg.Centimeter
	columns     = 2
)

// SVG draws the series to w. title, if not empty, heads every panel
// (for example the host and the ranks). Sizes and figures that are not
// positive cannot sit on a log axis and are left out; a panel no series
// has a figure for is left out; with no panel at all, SVG fails.
func SVG(w io.Writer, title string, series []bench.Series) error {
	panels := []panel{
		{"one-way latency", "µs", func(s bench.Series) map[int]float64 { return s.Latency }},
		{"bandwidth", "GB/s", func(s bench.Series) map[int]float64 { return s.Bandwidth }},
	}
	for _, k := range bench.CollNames(series) {
		panels = append(panels, panel{k + ", time per call", "µs", func(s bench.Series) map[int]float64 { return s.Coll[k] }})
	}
	var plots []*plot.Plot
	for _, pn := range panels {
		p, err := draw1(title, pn, series)
		if err != nil {
			return err
		}
		if p != nil {
			plots = append(plots, p)
		}
	}
	if len(plots) == 0 {
		return errors.New("chart: nothing to plot (no positive figures)")
	}
	cols := min(columns, len(plots))
	rows := (len(plots) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
		for c := range grid[r] {
			if i := r*cols + c; i < len(plots) {
				grid[r][c] = plots[i]
			}
		}
	}
	canvas := vgsvg.New(panelWidth*vg.Length(cols), panelHeight*vg.Length(rows))
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	cans := plot.Align(grid, tiles, dc)
	for r := range grid {
		for c, p := range grid[r] {
			if p != nil {
				p.Draw(cans[r][c])
			}
		}
	}
	_, err := canvas.WriteTo(w)
	return err
}

// draw1 makes one panel's plot, nil if no series has a point for it.
func draw1(title string, pn panel, series []bench.Series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	if title != "" {
		p.Title.Text = title + ": " + pn.title
	}
	p.X.Label.Text = "message size"
	p.Y.Label.Text = pn.ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = sizeTicks{}, valueTicks{}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Millimeter*2, -vg.Millimeter*2
	p.Legend.Padding = vg.Points(2)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Add(plotter.NewGrid())
	drawn := 0
	for i, s := range series {
		m := pn.get(s)
		var pts plotter.XYs
		for _, n := range slices.Sorted(maps.Keys(m)) {
			if v := m[n]; n > 0 && v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
				pts = append(pts, plotter.XY{X: float64(n), Y: v})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, marks, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("chart: %s, %s: %w", pn.title, s.Label, err)
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		if !s.Courier {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		marks.Color = plotutil.Color(i)
		marks.Shape = plotutil.Shape(i)
		p.Add(line, marks)
		p.Legend.Add(s.Label, line, marks)
		drawn++
	}
	if drawn == 0 {
		return nil, nil
	}
	// A margin around the points (a log axis over a single value would
	// have no extent at all), wider for the figures so that a narrow
	// range still gets labelled ticks.
	p.X.Min, p.X.Max = p.X.Min/1.5, p.X.Max*1.5
	p.Y.Min, p.Y.Max = p.Y.Min/1.3, p.Y.Max*1.3
	if p.Y.Max/p.Y.Min < 3 {
		mid := math.Sqrt(p.Y.Max * p.Y.Min)
		p.Y.Min, p.Y.Max = mid/math.Sqrt(3), mid*math.Sqrt(3)
	}
	// Room above the lines for the legend: about 7 % of the height per
	// entry, on the log scale.
	f := min(0.6, 0.07*float64(drawn))
	p.Y.Max = p.Y.Min * math.Pow(p.Y.Max/p.Y.Min, 1/(1-f))
	return p, nil
}

// sizeTicks marks message sizes: a labelled tick at every power of 16
// bytes ("1 B", "16 B", ..., "1 MiB"), a minor one at every other power
// of 2; when the axis spans few powers of 16, every power of 2 is
// labelled.
type sizeTicks struct{}

// Ticks implements plot.Ticker.
func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	first, last := int(math.Floor(math.Log2(lo))), int(math.Ceil(math.Log2(hi)))
	every := 4
	if last-first <= 8 {
		every = 1
	}
	var ts []plot.Tick
	for e := max(first, 0); e <= min(last, 62); e++ {
		v := math.Ldexp(1, e)
		if v < lo || v > hi {
			continue
		}
		t := plot.Tick{Value: v}
		if e%every == 0 {
			t.Label = bench.SizeName(1 << e)
		}
		ts = append(ts, t)
	}
	return ts
}

// valueTicks marks a log axis of figures: labelled ticks at 1, 2 and 5
// times each power of 10 when the axis spans up to 3 of them, else at
// each power of 10 with minor ticks at 2 to 9 times it; where that would
// label fewer than two ticks, every multiple of a power of 10 is
// labelled.
type valueTicks struct{}

// Ticks implements plot.Ticker.
func (valueTicks) Ticks(lo, hi float64) []plot.Tick {
	first, last := int(math.Floor(math.Log10(lo))), int(math.Ceil(math.Log10(hi)))
	labelled := func(e, m int) bool { return m == 1 || last-first <= 3 && (m == 2 || m == 5) }
	count := 0
	for e := first; e <= last; e++ {
		for m := 1; m <= 9; m++ {
			if v := math.Pow(10, float64(e)) * float64(m); v >= lo && v <= hi && labelled(e, m) {
				count++
			}
		}
	}
	if count < 2 {
		labelled = func(int, int) bool { return true }
	}
	var ts []plot.Tick
	for e := first; e <= last; e++ {
		for m := 1; m <= 9; m++ {
			v := math.Pow(10, float64(e)) * float64(m)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if labelled(e, m) {
				t.Label = strconv.FormatFloat(v, 'f', max(0, -e), 64)
				if e >= 6 {
					t.Label = fmt.Sprintf("%de%d", m, e)
				}
			}
			ts = append(ts, t)
		}
	}
	return ts
}
