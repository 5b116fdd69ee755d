package trace

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// ErrSameRank is the error of merging files that hold the same rank (two
// runs' files, or one file given twice).
var ErrSameRank = errors.New("a rank is in more than one of the files")

// The Clock of merged files: how their times were aligned.
const (
	ClockOneHost    = "wall clock at each rank's Init, one host: the ranks' times are comparable"
	ClockManyHosts  = "wall clock at each rank's Init, %d hosts: the ranks' times are as comparable as the hosts' clocks are synchronized (NTP: often within a millisecond; PTP: microseconds)"
	ClockSingleRank = "wall clock at the rank's Init"
)

// Merge puts the files on one clock and makes one file of them: its
// origin is the earliest origin among them, and each file's times move by
// the difference of its origin from that one (the origins are wall-clock
// instants, so ranks of one host line up; ranks of several hosts line up
// as well as the hosts' clocks agree). The ranks keep their pids and
// threads; the spans come in order of start after every file's metadata
// events. A rank in two files is an error matching ErrSameRank.
func Merge(files ...*File) (*File, error) {
	if len(files) == 0 {
		return nil, errors.New("no files to merge")
	}
	for i, f := range files {
		if f == nil || f.OtherData == nil {
			return nil, fmt.Errorf("%w: file %d has no courier metadata", ErrFormat, i+1)
		}
	}
	origin := files[0].OtherData.OriginUnixNano
	for _, f := range files[1:] {
		origin = min(origin, f.OtherData.OriginUnixNano)
	}
	out := &File{DisplayTimeUnit: "ns", OtherData: &Meta{Format: FormatName, Version: Version, OriginUnixNano: origin}}
	seen := map[int]bool{}
	hosts := map[string]bool{}
	var spans []Event
	for _, f := range files {
		for _, r := range f.OtherData.Ranks {
			if seen[r.Rank] {
				return nil, fmt.Errorf("%w: rank %d", ErrSameRank, r.Rank)
			}
			seen[r.Rank] = true
			hosts[r.Host] = true
			out.OtherData.Ranks = append(out.OtherData.Ranks, r)
		}
		shift := Micros(f.OtherData.OriginUnixNano - origin)
		for _, e := range f.TraceEvents {
			if e.Ph == "M" {
				out.TraceEvents = append(out.TraceEvents, e)
				continue
			}
			e.Ts += shift
			if e.Args != nil {
				a := *e.Args
				if a.StartedUs != nil {
					a.StartedUs = new(*a.StartedUs + shift)
				}
				if a.PostedUs != nil {
					a.PostedUs = new(*a.PostedUs + shift)
				}
				if a.CompletedUs != nil {
					a.CompletedUs = new(*a.CompletedUs + shift)
				}
				e.Args = &a
			}
			spans = append(spans, e)
		}
	}
	slices.SortFunc(out.OtherData.Ranks, func(a, b RankInfo) int { return cmp.Compare(a.Rank, b.Rank) })
	switch {
	case len(out.OtherData.Ranks) == 1:
		out.OtherData.Clock = ClockSingleRank
	case len(hosts) == 1:
		out.OtherData.Clock = ClockOneHost
	default:
		out.OtherData.Clock = fmt.Sprintf(ClockManyHosts, len(hosts))
	}
	slices.SortStableFunc(spans, func(a, b Event) int { return cmp.Compare(a.Ts, b.Ts) })
	out.TraceEvents = append(out.TraceEvents, spans...)
	if err := out.check(); err != nil { // origins decades apart
		return nil, fmt.Errorf("merging: %w", err)
	}
	return out, nil
}
