package mp

import (
	"fmt"
	"runtime"
	"strings"
	"unicode"

	"github.com/courier-mp/courier/backend"
)

// The words of the pending-operation reports (the timeout's error, the
// watchdog's, PendingReport, courier run's): an operation the program
// called directly as it called it, and the messages of a collective that
// courier runs over point-to-point as the collective the program called
// and the rank it waits for, never as the library's tags.

// What a communicator's collective in its turn was called as (collCall):
// a backend.CollKind, with collNonblocking for the I… form (and
// collOnStream as well for the I…OnStream form), or Split or Dup; zero
// before the first.
const (
	collNonblocking = 1 << 8
	collSplit       = 1 << 9
	collDup         = 1<<9 | 1
	collOnStream    = 1 << 10
)

// derivedCall is the collCall of Split's or Dup's allgather.
func derivedCall(op string) uint32 {
	if op == "dup" {
		return collDup
	}
	return collSplit
}

// callNames are the collectives' names as a program calls them.
var callNames = [...]string{backend.Bcast: "Bcast", backend.Reduce: "Reduce", backend.Allreduce: "Allreduce",
	backend.Allgather: "Allgather", backend.ReduceScatter: "ReduceScatter", backend.Alltoall: "Alltoall",
	backend.Barrier: "Barrier", backend.Gather: "Gather", backend.Scatter: "Scatter", backend.Scan: "Scan",
	backend.Exscan: "Exscan", backend.Gatherv: "Gatherv", backend.Scatterv: "Scatterv",
	backend.Allgatherv: "Allgatherv", backend.Alltoallv: "Alltoallv"}

// collCallName names a collCall as the program called it ("Allreduce",
// "IreduceScatter", "Split"); "a collective" when it is not known.
func collCallName(call uint32) string {
	switch call {
	case collSplit:
		return "Split"
	case collDup:
		return "Dup"
	}
	k := call &^ (collNonblocking | collOnStream)
	if k == 0 || int(k) >= len(callNames) || callNames[k] == "" {
		return "a collective"
	}
	name := callNames[k]
	if call&collNonblocking != 0 {
		r := []rune(name)
		r[0] = unicode.ToLower(r[0])
		name = "I" + string(r)
	}
	if call&collOnStream != 0 {
		name += "OnStream"
	}
	return name
}

// reportLines describes pending (the transport's Pending) and then the
// messages that arrived but match no receive, a line each.
func (c *Comm) reportLines(pending []backend.OpInfo) []string {
	lines := make([]string, 0, len(pending))
	for _, p := range pending {
		lines = append(lines, c.describeOp(p))
	}
	if a, ok := c.conn.(interface{ Arrived() []backend.OpInfo }); ok {
		for _, m := range a.Arrived() {
			lines = append(lines, describeArrived(m))
		}
	}
	return lines
}

// describeOp says what one pending operation of c is, in the program's
// words.
func (c *Comm) describeOp(p backend.OpInfo) string {
	peer := "rank " + fmt.Sprint(p.Peer)
	if p.Peer == AnySource {
		peer = "any rank"
	}
	tag := fmt.Sprint(p.Tag)
	if p.Tag == AnyTag {
		tag = "any"
	}
	where := callSite(p.Caller)
	switch {
	case p.Tag == collTag && (p.Op == "send" || p.Op == "recv"):
		part := "a receive from it"
		if p.Op == "send" {
			part = "a send to it"
		}
		if p.Peer == AnySource {
			part = "a receive"
		}
		return fmt.Sprintf("%s%s waiting for %s: %s", collCallName(c.collCall.Load()), where, peer, part)
	case p.Tag == valueTag && p.Op == "send":
		return fmt.Sprintf("SendValue to %s%s, its encoding", peer, where)
	case p.Tag == valueTag && p.Op == "recv":
		return fmt.Sprintf("RecvValue from %s%s, its encoding", peer, where)
	case p.Op == "send":
		return fmt.Sprintf("send to %s, tag %s, %d × %v%s", peer, tag, p.Count, p.Type, where)
	case p.Op == "recv":
		return fmt.Sprintf("recv from %s, tag %s, %d × %v%s", peer, tag, p.Count, p.Type, where)
	}
	// A collective the transport runs itself ("allreduce (shared memory)").
	name := p.Op
	if call := c.collCall.Load(); call&collSplit == 0 {
		k := backend.CollKind(call &^ (collNonblocking | collOnStream))
		if first, rest, _ := strings.Cut(p.Op, " "); k != 0 && first == k.String() {
			name = strings.TrimSpace(collCallName(call) + " " + rest)
		}
	}
	of := fmt.Sprintf(" of %d × %v", p.Count, p.Type)
	if p.Count == 0 {
		of = "" // a Barrier: no data
	}
	if p.Peer < 0 {
		return fmt.Sprintf("%s%s%s", name, of, where)
	}
	return fmt.Sprintf("%s%s%s waiting for %s", name, of, where, peer)
}

// waitOp is the operation of a pending one as the wait-for graph reads it
// ("send", "recv", or a collective's name): a collective's messages are
// the collective, not the sends and receives it is made of, so that the
// graph tells ranks stuck in collectives from ranks stuck in receives.
func (c *Comm) waitOp(p backend.OpInfo) string {
	if p.Tag == collTag && (p.Op == "send" || p.Op == "recv") {
		return strings.ToLower(collCallName(c.collCall.Load()))
	}
	return p.Op
}

// describeArrived says what a message that arrived unmatched is.
func describeArrived(m backend.OpInfo) string {
	switch m.Tag {
	case collTag:
		return fmt.Sprintf("arrived from rank %d, of a collective: this rank has not called it yet", m.Peer)
	case valueTag:
		return fmt.Sprintf("arrived from rank %d, a value's encoding: no RecvValue has taken it yet", m.Peer)
	}
	return fmt.Sprintf("arrived from rank %d, tag %d, %d × %v: no receive matches it yet", m.Peer, m.Tag, m.Count, m.Type)
}

// callSite says where the program made the call at pc: " (called at
// file:line in function)", or "" when pc is unknown.
func callSite(pc uintptr) string {
	file, line, fn, ok := callerOf(pc)
	if !ok {
		return ""
	}
	return fmt.Sprintf(" (called at %s:%d in %s)", file, line, fn)
}

// callerOf is where the program made the call at pc (callerPC's): the
// file, line and function; ok is false when pc is unknown. The reports
// and the trace's spans (trace.go) both say it so.
func callerOf(pc uintptr) (file string, line int, fn string, ok bool) {
	if pc == 0 {
		return "", 0, "", false
	}
	f := runtime.FuncForPC(pc - 1)
	if f == nil {
		return "", 0, "", false
	}
	file, line = f.FileLine(pc - 1)
	return file, line, f.Name(), true
}
