package trace

import (
	"cmp"
	"fmt"
	"slices"
)

// Span is one span of a rank as Build takes it: its track, name and
// category, its start and end in nanoseconds after the file's origin, and
// its details (Build fills in Track and Lane).
type Span struct {
	Track      string
	Name, Cat  string
	Start, End int64
	Args       Args
}

// Build makes the file of one rank (pid rank) from its spans: each track
// of tracks (in that order; tracks that only spans name follow, in the
// order they first appear) is laid out in lanes (Lanes), each lane a
// thread named for its track ("host", then "host +1", … for the lanes
// that spans in flight together need), numbered in order. Every track of
// tracks gets a thread even with no span. The spans follow the metadata
// events in order of start.
func Build(meta Meta, rank int, tracks []string, spans []Span) *File {
	order := slices.Clone(tracks)
	byTrack := map[string][]int{}
	for i, s := range spans {
		if _, ok := byTrack[s.Track]; !ok && !slices.Contains(order, s.Track) {
			order = append(order, s.Track)
		}
		byTrack[s.Track] = append(byTrack[s.Track], i)
	}
	f := &File{DisplayTimeUnit: "ns", OtherData: &meta}
	f.TraceEvents = append(f.TraceEvents,
		Event{Name: "process_name", Ph: "M", Pid: rank, Args: &Args{Name: fmt.Sprintf("rank %d", rank)}},
		Event{Name: "process_sort_index", Ph: "M", Pid: rank, Args: &Args{SortIndex: new(rank)}})
	var out []Event
	tid := 0
	for _, track := range order {
		idx := byTrack[track]
		lane, n := Lanes(idx, func(i int) (int64, int64) { return spans[i].Start, spans[i].End })
		for l := range max(n, 1) {
			name := track
			if l > 0 {
				name = fmt.Sprintf("%s +%d", track, l)
			}
			f.TraceEvents = append(f.TraceEvents,
				Event{Name: "thread_name", Ph: "M", Pid: rank, Tid: tid + l, Args: &Args{Name: name}},
				Event{Name: "thread_sort_index", Ph: "M", Pid: rank, Tid: tid + l, Args: &Args{SortIndex: new(tid + l)}})
		}
		for k, i := range idx {
			s := spans[i]
			a := s.Args
			a.Track, a.Lane = track, lane[k]
			out = append(out, Event{
				Name: s.Name, Cat: s.Cat, Ph: "X",
				Ts: Micros(s.Start), Dur: new(Micros(max(s.End, s.Start) - s.Start)),
				Pid: rank, Tid: tid + lane[k], Args: &a,
			})
		}
		tid += max(n, 1)
	}
	slices.SortStableFunc(out, func(a, b Event) int { return cmp.Compare(a.Ts, b.Ts) })
	f.TraceEvents = append(f.TraceEvents, out...)
	return f
}

// Micros converts nanoseconds to the format's microseconds.
func Micros(ns int64) float64 { return float64(ns) / 1e3 }
