package mp

import "strings"

// PendingReport describes the operations pending on this rank, one line
// each, as the error of a wait that passed the timeout lists them: the
// operation, the peer, the tag, the count and element type, and where the
// program called it, e.g.
//
//	recv from rank 1, tag 7, 4 × float32 (called at /src/halo.go:42 in main.exchange)
//
// It returns "" when nothing is pending, and for a nil Comm. It is safe to
// call from any goroutine while others wait, which is what it is for: a
// test harness or a watchdog that finds a rank stuck asks it what the rank
// waits for. A collective shows as the program called it, with the rank
// it waits for:
//
//	Allreduce (called at /src/step.go:17 in main.step) waiting for rank 3: a receive from it
//
// and the messages that have arrived but match no receive yet follow the
// operations, so that a receive waiting for another tag or sender is seen
// beside the message that did come:
//
//	arrived from rank 1, tag 8, 4 × float32: no receive matches it yet
func (c *Comm) PendingReport() string {
	if c == nil {
		return ""
	}
	return strings.Join(c.reportLines(c.conn.Pending()), "\n")
}
