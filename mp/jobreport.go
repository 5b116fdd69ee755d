package mp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/waitgraph"
)

// The job's report without a launcher. Under courier run, a rank whose
// wait passed its timeout asks courier run to print every rank's pending
// operations (control.go). Under mpirun, srun or any other launcher there
// is no such channel, so the rank asks the other ranks itself, over the
// job's own connections (backend.Reporter: frames that the transports'
// readers take while every goroutine of the program is blocked), and puts
// their answers and the wait-for graph they make in the error its wait
// ends with, before it aborts (which would end the others' waits before
// they could be listed). Each rank answers with what courier run would be
// told: its report and its "waits" lines (peerAnswer).

// askWait bounds how long a rank waits for the other ranks' answers.
const askWait = 2 * time.Second

// askedRanksShown bounds how many other ranks' reports the error lists
// whole; the graph covers every rank that answered.
const askedRanksShown = 32

// setPeerAnswer makes the connection of c, a world communicator, answer
// the other ranks' questions with c's report (peerAnswer).
func (c *Comm) setPeerAnswer() {
	if r, ok := c.conn.(backend.Reporter); ok {
		r.SetReport(c.peerAnswer)
	}
}

// peerAnswer is this rank's answer to a rank that asks (at most max
// bytes): the report of c, its world communicator, and of those derived
// from it that are open, and c's "waits" lines (not the whole process's,
// as courier run is told: ranks that are goroutines of one process,
// WithJob's, each answer for themselves). Once a wait of this rank has
// timed out, it is what was pending then (freezeAnswer): the abort that
// follows ends those operations, and a rank that asks after it must still
// learn what this one waited for.
func (c *Comm) peerAnswer(max int) []byte {
	a := c.answer.Load()
	if a == nil {
		a = c.answerNow()
	}
	return encodeAnswer(a.text, a.waits, max)
}

// answerNow is the answer c, a world communicator, gives now.
func (c *Comm) answerNow() *answer {
	var text, waits strings.Builder
	text.WriteString(c.pendingBlock())
	if c.fam != nil {
		for _, d := range c.fam.stillOpen() {
			text.WriteString(d.pendingBlock())
		}
	}
	c.writeWaits(&waits)
	return &answer{text: text.String(), waits: waits.String()}
}

// answer is a rank's report and "waits" lines, as it answers them.
type answer struct{ text, waits string }

// freezeAnswer keeps, as the answer of c's world to every question from
// now on, what is pending now: a wait on c has timed out.
func (c *Comm) freezeAnswer() *answer {
	w := c.world()
	a := w.answerNow()
	w.answer.CompareAndSwap(nil, a)
	return a
}

// world is the communicator c was derived from, through every parent.
func (c *Comm) world() *Comm {
	for c.parent != nil {
		c = c.parent
	}
	return c
}

// encodeAnswer writes an answer, "report N\n" and N bytes of text, then
// "waits M\n" and M bytes of lines (the form courier run is answered in
// too, control.go), in at most max bytes: the waits are
// kept whole where they fit in half of max (the graph is drawn from
// them), and the text is cut at a line, with a line that says so.
func encodeAnswer(text, waits string, max int) []byte {
	const cut = "\t… (cut: the rest did not fit the answer)\n"
	room := max - 64 // the two length lines
	if room <= 0 {
		return nil
	}
	if len(waits) > room/2 {
		waits = cutLines(waits, room/2)
	}
	if len(text)+len(waits) > room {
		text = cutLines(text, room-len(waits)-len(cut)) + cut
	}
	return fmt.Appendf(nil, "report %d\n%swaits %d\n%s", len(text), text, len(waits), waits)
}

// cutLines returns the longest prefix of s of at most n bytes that ends
// at a line's end (empty when none does).
func cutLines(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	if i := strings.LastIndexByte(s[:n], '\n'); i >= 0 {
		return s[:i+1]
	}
	return ""
}

// decodeAnswer reads an answer of encodeAnswer's form; ok is false for
// anything else (an empty answer: the rank has no report to give).
func decodeAnswer(b []byte) (text, waits string, ok bool) {
	s := string(b)
	text, s, ok = lengthField(s, "report ")
	if !ok {
		return "", "", false
	}
	waits, s, ok = lengthField(s, "waits ")
	return text, waits, ok && s == ""
}

// lengthField reads "name N\n" and N bytes from the front of s.
func lengthField(s, name string) (field, rest string, ok bool) {
	s, ok = strings.CutPrefix(s, name)
	if !ok {
		return "", "", false
	}
	nl := strings.IndexByte(s, '\n')
	if nl < 0 {
		return "", "", false
	}
	n, err := strconv.Atoi(s[:nl])
	s = s[nl+1:]
	if err != nil || n < 0 || n > len(s) {
		return "", "", false
	}
	return s[:n], s[n:], true
}

// askJob asks the other ranks of c's job what they wait for and describes
// their answers, and the wait-for graph they make with this rank's own
// waits, for the error of c's wait that timed out; "" when c's transport
// cannot ask or the job has one rank.
func (c *Comm) askJob() string {
	w := c.world()
	r, ok := w.conn.(backend.Reporter)
	if !ok || w.size < 2 {
		return ""
	}
	mine := c.freezeAnswer()
	answers := r.AskReports(askWait)
	waits := map[int][]waitgraph.Wait{w.rank: waitgraph.Parse(mine.waits)}
	var b strings.Builder
	fmt.Fprintf(&b, "what the other ranks were waiting for (asked over the job's connections):")
	shown := 0
	for k := range w.size {
		if k == w.rank {
			continue
		}
		a, answered := answers[k]
		text, wl, ok := decodeAnswer(a)
		if ok {
			waits[k] = waitgraph.Parse(wl)
		}
		if shown++; shown > askedRanksShown {
			continue
		}
		switch {
		case !answered:
			fmt.Fprintf(&b, "\n[%d] (no answer within %v: it has exited, lost its connection, or does not use courier)", k, askWait)
		case !ok:
			fmt.Fprintf(&b, "\n[%d] (no report)", k)
		default:
			for line := range strings.Lines(text) {
				fmt.Fprintf(&b, "\n[%d] %s", k, strings.TrimSuffix(line, "\n"))
			}
		}
	}
	if shown > askedRanksShown {
		fmt.Fprintf(&b, "\n(%d more ranks: their operations are in the graph below)", shown-askedRanksShown)
	}
	for _, line := range waitgraph.Describe(w.size, waits) {
		b.WriteString("\n")
		b.WriteString(line)
	}
	return b.String()
}
