package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Series is what one line of a plot and one column of a table show: the
// figures of one run, or, combined, the medians of several runs that
// share a label.
type Series struct {
	// Label names the series (the runs' Header.Label).
	Label string
	// Courier is true for runs of courier bench, false for the programs
	// it is compared with (whose series are the anchors of the ratios).
	Courier bool
	// Runs is how many documents the figures are the median of.
	Runs int
	// Ranks is the job size of the first run.
	Ranks int
	// Latency is one-way latency in µs by message size; Bandwidth GB/s
	// by message size.
	Latency, Bandwidth map[int]float64
	// Coll is the time per call in µs by collective and size.
	Coll map[string]map[int]float64
}

// Combine turns documents into series, in the order their labels first
// appear. With median, documents with the same label are one series
// whose figure at each size is the median of theirs (for an even count,
// the mean of the two middle ones: with two rounds, the mean, which
// favours neither a time nor a bandwidth); without, each document is a series and a label
// seen before gets " (2)", " (3)", ... appended. A document without a
// label is named after its program and backend.
func Combine(docs []*Document, median bool) []Series {
	type acc struct {
		s       Series
		lat, bw map[int][]float64
		coll    map[string]map[int][]float64
	}
	var order []*acc
	byLabel := map[string]*acc{}
	seen := map[string]int{}
	for _, d := range docs {
		label := d.Header.Label
		if label == "" {
			label = strings.TrimSpace(d.Header.Program + " " + d.Header.Backend)
		}
		a := byLabel[label]
		if !median || a == nil {
			if !median {
				if seen[label]++; seen[label] > 1 {
					label = fmt.Sprintf("%s (%d)", label, seen[label])
				}
			}
			a = &acc{
				s:    Series{Label: label, Courier: strings.HasPrefix(d.Header.Program, "courier"), Ranks: d.Header.Ranks},
				lat:  map[int][]float64{},
				bw:   map[int][]float64{},
				coll: map[string]map[int][]float64{},
			}
			byLabel[label] = a
			order = append(order, a)
		}
		a.s.Runs++
		for _, r := range d.P2P {
			if r.Kind == "latency" {
				a.lat[r.Bytes] = append(a.lat[r.Bytes], r.LatencyMicros)
			} else {
				a.bw[r.Bytes] = append(a.bw[r.Bytes], r.GBps)
			}
		}
		for _, r := range d.Coll {
			if a.coll[r.Name] == nil {
				a.coll[r.Name] = map[int][]float64{}
			}
			a.coll[r.Name][r.Bytes] = append(a.coll[r.Name][r.Bytes], r.TimeMicros)
		}
	}
	out := make([]Series, 0, len(order))
	for _, a := range order {
		a.s.Latency, a.s.Bandwidth = medians(a.lat), medians(a.bw)
		a.s.Coll = map[string]map[int]float64{}
		for k, v := range a.coll {
			a.s.Coll[k] = medians(v)
		}
		out = append(out, a.s)
	}
	return out
}

// medians maps each size to the median of its figures.
func medians(m map[int][]float64) map[int]float64 {
	out := make(map[int]float64, len(m))
	for n, v := range m {
		v = slices.Sorted(slices.Values(v))
		out[n] = (v[(len(v)-1)/2] + v[len(v)/2]) / 2
	}
	return out
}

// CollNames lists the collectives some series has, in the order of
// Collectives, then any others by name.
func CollNames(series []Series) []string {
	have := map[string]bool{}
	for _, s := range series {
		for k := range s.Coll {
			have[k] = true
		}
	}
	var out []string
	for _, k := range Collectives {
		if have[k] {
			out = append(out, k)
			delete(have, k)
		}
	}
	return append(out, slices.Sorted(maps.Keys(have))...)
}

// measure is one table: its title, and the figures of a series by size.
type measure struct {
	title string
	get   func(Series) map[int]float64
}

// Table writes Markdown tables of the series: one-way latency (µs),
// bandwidth (GB/s) and each collective's time per call (µs), one row per
// size, one column per series, then one column per pair of a courier
// series and an anchor series: courier's figure divided by the
// anchor's (below 1 is faster for a time, slower for a bandwidth).
func Table(w io.Writer, series []Series) error {
	var b strings.Builder
	measures := []measure{
		{"one-way latency, µs", func(s Series) map[int]float64 { return s.Latency }},
		{"bandwidth, GB/s", func(s Series) map[int]float64 { return s.Bandwidth }},
	}
	for _, k := range CollNames(series) {
		measures = append(measures, measure{k + ", µs per call", func(s Series) map[int]float64 { return s.Coll[k] }})
	}
	for _, m := range measures {
		// The series with a figure for this measure, and the sizes.
		var have, courier, anchors []Series
		sizes := map[int]bool{}
		for _, s := range series {
			if len(m.get(s)) == 0 {
				continue
			}
			have = append(have, s)
			if s.Courier {
				courier = append(courier, s)
			} else {
				anchors = append(anchors, s)
			}
			for n := range m.get(s) {
				sizes[n] = true
			}
		}
		if len(sizes) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s (%s)\n\n| bytes |", m.title, runsNote(have))
		cols := 1
		for _, s := range have {
			fmt.Fprintf(&b, " %s |", s.Label)
			cols++
		}
		for _, c := range courier {
			for _, a := range anchors {
				fmt.Fprintf(&b, " %s ÷ %s |", c.Label, a.Label)
				cols++
			}
		}
		b.WriteString("\n|")
		for range cols {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for _, n := range slices.Sorted(maps.Keys(sizes)) {
			fmt.Fprintf(&b, "| %s |", SizeName(n))
			for _, s := range have {
				fmt.Fprintf(&b, " %s |", figure(m.get(s), n))
			}
			for _, c := range courier {
				for _, a := range anchors {
					x, okc := m.get(c)[n]
					y, oka := m.get(a)[n]
					if okc && oka && y > 0 {
						fmt.Fprintf(&b, " %.2f |", x/y)
					} else {
						b.WriteString(" — |")
					}
				}
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// runsNote says what the figures of a table are.
func runsNote(series []Series) string {
	most := 0
	for _, s := range series {
		most = max(most, s.Runs)
	}
	if most <= 1 {
		return "one run each"
	}
	return "median over the runs of each label"
}

// figure formats m[n] with three significant digits or so, "—" if absent.
func figure(m map[int]float64, n int) string {
	v, ok := m[n]
	switch {
	case !ok:
		return "—"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// SizeName writes a byte count as "1 B", "4 KiB", "1.5 MiB".
func SizeName(n int) string {
	units := []string{"B", "KiB", "MiB", "GiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v, u = v/1024, u+1
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[u])
	}
	return fmt.Sprintf("%.3g %s", v, units[u])
}
