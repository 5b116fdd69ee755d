package mp

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The watchdog, all of it. A communicator without a timeout has a
// watchdog instead: when waits on it are blocked and none of its waits has
// ended for the watchdog's period (COURIER_WATCHDOG, DefaultWatchdog when
// unset; "0" or "off" turns it off), the pending-operation report is
// written once to standard error, and the waits go on waiting. The next
// wait that ends re-arms it. With a timeout (WithTimeout, COURIER_TIMEOUT)
// the watchdog is off unless COURIER_WATCHDOG is set: the timeout's abort
// carries the same report.
//
// Nothing of it is on the message path but two atomic counters a wait
// adds to (begun and ended, on the Comm): one goroutine per process looks
// at every open communicator's counters a few times per period, and runs
// only while a communicator with a watchdog is open (track, untrack).

// DefaultWatchdog is the watchdog's period when COURIER_WATCHDOG is unset
// and the communicator has no timeout.
const DefaultWatchdog = 5 * time.Minute

// watchdogEnv names the variable of the watchdog's period.
const watchdogEnv = "COURIER_WATCHDOG"

// watchdogFromEnv reads COURIER_WATCHDOG through env: the period, and
// whether it was set (a period of zero is off).
func watchdogFromEnv(env func(string) string) (time.Duration, bool, error) {
	s := strings.TrimSpace(env(watchdogEnv))
	switch strings.ToLower(s) {
	case "":
		return 0, false, nil
	case "off", "false", "no":
		return 0, true, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, true, nil
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second)), true, nil
	}
	return 0, true, invalidf("%s=%q: want a duration such as 5m, or 0 or off", watchdogEnv, s)
}

// watchdogPeriod decides a communicator's watchdog period from the
// environment's setting and its timeout (zero: off).
func watchdogPeriod(set time.Duration, isSet bool, timeout time.Duration) time.Duration {
	switch {
	case isSet:
		return set
	case timeout > 0:
		return 0
	}
	return DefaultWatchdog
}

// waitCounts are a communicator's counts of waits begun and ended, what
// the watchdog looks at.
type waitCounts struct {
	begun, ended atomic.Uint64
}

// beginWait counts a wait that starts; the wait calls endWait when it
// ends. Both are no-ops on a nil Comm (whose calls fail).
func (c *Comm) beginWait() {
	if c != nil {
		c.waits.begun.Add(1)
	}
}

// endWait counts a wait that ended.
func (c *Comm) endWait() {
	if c != nil {
		c.waits.ended.Add(1)
	}
}

// reports is the process's registry of open communicators, for the
// watchdog and for the launcher's request for reports (control.go).
var reports struct {
	mu   sync.Mutex
	open map[*Comm]struct{}
	out  io.Writer // where the watchdog writes; os.Stderr but in tests
	dog  *watchdog // running while a communicator with a watchdog is open
	dogs int       // open communicators with a watchdog
}

// reportOutput returns where the watchdog writes.
func reportOutput() io.Writer {
	reports.mu.Lock()
	defer reports.mu.Unlock()
	if reports.out == nil {
		return os.Stderr
	}
	return reports.out
}

// setReportOutput makes the watchdog write to w (nil: standard error)
// and returns what it wrote to before; for tests.
func setReportOutput(w io.Writer) io.Writer {
	reports.mu.Lock()
	defer reports.mu.Unlock()
	old := reports.out
	reports.out = w
	return old
}

// track registers an open communicator, and starts the watchdog if it is
// the first with one.
func (c *Comm) track() {
	reports.mu.Lock()
	defer reports.mu.Unlock()
	if reports.open == nil {
		reports.open = make(map[*Comm]struct{})
	}
	reports.open[c] = struct{}{}
	if c.watchdog > 0 {
		reports.dogs++
		if reports.dog == nil {
			reports.dog = startWatchdog()
		}
	}
	startControl()
}

// untrack removes a communicator that is closing; the watchdog stops
// (and untrack waits for it) when no communicator with one is left.
func (c *Comm) untrack() {
	reports.mu.Lock()
	if _, ok := reports.open[c]; !ok {
		reports.mu.Unlock()
		return
	}
	delete(reports.open, c)
	var stop *watchdog
	if c.watchdog > 0 {
		reports.dogs--
		if reports.dogs == 0 {
			stop, reports.dog = reports.dog, nil
		}
	}
	ctl := len(reports.open) == 0
	reports.mu.Unlock()
	if stop != nil {
		close(stop.stop)
		<-stop.done
	}
	if ctl {
		stopControl()
	}
}

// openComms lists the open communicators, the world ones first.
func openComms() []*Comm {
	reports.mu.Lock()
	defer reports.mu.Unlock()
	out := make([]*Comm, 0, len(reports.open))
	for c := range reports.open {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *Comm) int {
		if a.id != b.id {
			return int(a.id) - int(b.id)
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

// watchdog is the goroutine that watches the open communicators.
type watchdog struct {
	stop, done chan struct{}
}

// watchState is what the watchdog remembers of one communicator.
type watchState struct {
	ended    uint64
	since    time.Time // when its waits were last seen to progress
	reported bool
}

func startWatchdog() *watchdog {
	w := &watchdog{stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// watchTick is how often the watchdog looks, for a period p: a quarter of
// it, between 10 ms and 5 s.
func watchTick(p time.Duration) time.Duration {
	return min(max(p/4, 10*time.Millisecond), 5*time.Second)
}

func (w *watchdog) run() {
	defer close(w.done)
	seen := make(map[*Comm]*watchState)
	t := time.NewTimer(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		tick := 5 * time.Second
		comms := openComms()
		live := make(map[*Comm]*watchState, len(comms))
		for _, c := range comms {
			if c.watchdog <= 0 {
				continue
			}
			tick = min(tick, watchTick(c.watchdog))
			s := seen[c]
			if s == nil {
				s = &watchState{since: now}
			}
			live[c] = s
			begun, ended := c.waits.begun.Load(), c.waits.ended.Load()
			if ended != s.ended || begun <= ended {
				s.ended, s.since, s.reported = ended, now, false
				continue
			}
			if !s.reported && now.Sub(s.since) >= c.watchdog {
				s.reported = true
				io.WriteString(reportOutput(), c.watchdogReport(now.Sub(s.since)))
			}
		}
		seen = live
		t.Reset(tick)
	}
}

// watchdogReport is what the watchdog writes about c, whose waits have
// made no progress for d.
func (c *Comm) watchdogReport(d time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "courier: watchdog (%s=%v): no wait on rank %d of %s has ended for %v, and one still waits; it keeps waiting.\n",
		watchdogEnv, c.watchdog, c.rank, c.name, d.Round(time.Millisecond))
	b.WriteString(c.pendingBlock())
	return b.String()
}

// pendingBlock lists c's pending operations under a heading, a line each,
// ending in a newline.
func (c *Comm) pendingBlock() string {
	pending := c.conn.Pending()
	var b strings.Builder
	fmt.Fprintf(&b, "%d operation(s) pending on rank %d of %s:\n", len(pending), c.rank, c.name)
	for _, line := range c.reportLines(pending) {
		b.WriteString("\t")
		b.WriteString(line)
		b.WriteString("\n")
	}
	return b.String()
}
