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
// waits for. (A collective that courier runs over point-to-point messages
// shows as the messages it waits for, with the library's negative tags.)
func (c *Comm) PendingReport() string {
	if c == nil {
		return ""
	}
	pending := c.conn.Pending()
	lines := make([]string, len(pending))
	for i, p := range pending {
		lines[i] = describeOp(c.rank, p)
	}
	return strings.Join(lines, "\n")
}
