package campaign

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Summary is the figures of a transport's trials.
type Summary struct {
	Transport string
	Trials    int
	// Setup counts trials that failed before the kill.
	Setup int
	// Survivors counts the ranks that were not killed, over the trials
	// that got to the kill.
	Survivors int
	// The survivors that hung, panicked, received a wrong result, ended
	// before the kill, exited without their END line, or ended with an
	// error that is not ErrPeerLost.
	Hangs, Panics, Wrong, Early, NoEnd, NotLost int
	// Named counts survivors whose error names the killed rank.
	Named int
	// Median and Max are the survivors' times from the kill to their
	// error.
	Median, Max time.Duration
	// Kinds counts the steps the survivors were in when they failed.
	Kinds map[string]int
}

// Summarize adds up results (all of one transport).
func Summarize(transport string, results []*Result) Summary {
	s := Summary{Transport: transport, Kinds: map[string]int{}}
	var times []time.Duration
	for _, r := range results {
		s.Trials++
		if r.Setup != nil {
			s.Setup++
			continue
		}
		for _, v := range r.Survivors {
			s.Survivors++
			switch {
			case v.Hung:
				s.Hangs++
			case v.Panicked:
				s.Panics++
			}
			if v.Wrong {
				s.Wrong++
			}
			if v.Early {
				s.Early++
			}
			if !v.Ended {
				if !v.Hung && !v.Panicked {
					s.NoEnd++
				}
				continue
			}
			if !v.PeerLost {
				s.NotLost++
			}
			if v.Lost == r.Victim {
				s.Named++
			}
			s.Kinds[v.Step]++
			if !v.Early {
				times = append(times, v.ToError)
			}
		}
	}
	if len(times) > 0 {
		slices.Sort(times)
		s.Median, s.Max = times[len(times)/2], times[len(times)-1]
	}
	return s
}

// Clean reports whether the trials found no defect.
func (s Summary) Clean() bool {
	return s.Setup+s.Hangs+s.Panics+s.Wrong+s.Early+s.NoEnd+s.NotLost == 0 && s.Named == s.Survivors
}

// WriteTable writes the summaries as a Markdown table.
func WriteTable(w io.Writer, sums []Summary) {
	fmt.Fprintln(w, "| transport | trials | survivors | hangs | panics | wrong results | ended early | no END | not ErrPeerLost | setup failures | names the dead rank | time to error, median | max |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range sums {
		rate := "—"
		if s.Survivors > 0 {
			rate = fmt.Sprintf("%d/%d (%.0f %%)", s.Named, s.Survivors, 100*float64(s.Named)/float64(s.Survivors))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s | %v | %v |\n",
			s.Transport, s.Trials, s.Survivors, s.Hangs, s.Panics, s.Wrong, s.Early, s.NoEnd, s.NotLost, s.Setup,
			rate, s.Median.Round(100*time.Microsecond), s.Max.Round(100*time.Microsecond))
	}
}

// WriteSteps writes, per transport, the kinds of step the survivors were
// in when their error came, and how many were.
func WriteSteps(w io.Writer, sums []Summary) {
	for _, s := range sums {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s.Kinds)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, s.Kinds[k]))
		}
		fmt.Fprintf(w, "%s: survivors' errors came in: %s\n", s.Transport, strings.Join(parts, ", "))
	}
}
