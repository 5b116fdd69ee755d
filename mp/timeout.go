package mp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/courier-mp/courier/backend"
)

// The timeout policy, all of it. A communicator has one bound, its
// timeout: WithTimeout's, else COURIER_TIMEOUT's (a duration such as "30s",
// or a number of seconds), else none. Every wait of a message call is
// bounded by it (Wait, WaitAll, WaitAny, the blocking calls, Probe, the
// collectives); a wait that passes it aborts the communicator with a
// report of the operations pending on this rank, so that every pending
// request ends with that error, which matches ErrTimeout. Init is bounded
// by its context's deadline, else by the timeout, else by
// DefaultInitTimeout. The transports get the timeout in
// backend.Config.Timeout; their requests' Wait(timeout) returns an error
// matching ErrTimeout and leaves the operation pending, and what follows is
// decided here.

// DefaultInitTimeout bounds Init when neither its context nor
// COURIER_TIMEOUT gives a deadline: a rank that never arrives makes Init
// fail instead of hanging.
const DefaultInitTimeout = 2 * time.Minute

// timeoutEnv names the variable of the communicator's timeout.
const timeoutEnv = "COURIER_TIMEOUT"

// timeoutFromEnv reads COURIER_TIMEOUT through env (zero when unset).
func timeoutFromEnv(env func(string) string) (time.Duration, error) {
	s := strings.TrimSpace(env(timeoutEnv))
	if s == "" {
		return 0, nil
	}
	return parseTimeout(s)
}

// parseTimeout reads a duration ("30s", "2m") or a number of seconds.
func parseTimeout(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, nil
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second)), nil
	}
	return 0, invalidf("%s=%q: want a duration such as 30s", timeoutEnv, s)
}

// initContext bounds Init's bootstrap: ctx as it is when it has a
// deadline, else the communicator's timeout, else DefaultInitTimeout.
func initContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, hasDeadline := ctx.Deadline(); hasDeadline {
		return ctx, func() {}
	}
	if timeout <= 0 {
		timeout = DefaultInitTimeout
	}
	return context.WithTimeout(ctx, timeout)
}

// wait completes a transport request, bounded by the communicator's
// timeout. When the bound passes, the communicator is aborted with a report
// of what was pending, and the request ends with that error.
func (c *Comm) wait(r backend.Request) (Status, error) {
	c.beginWait()
	defer c.endWait()
	st, err := r.Wait(c.timeout)
	if err != nil && c.timeout > 0 && errors.Is(err, ErrTimeout) {
		if done, _, _ := r.Test(); !done {
			c.abortTimedOut()
		}
		st, err = r.Wait(0)
	}
	return statusOf(st), err
}

// anyBound folds c's timeout into the bound of a wait for any of several
// requests (WaitAny): the shortest timeout among their communicators
// (zero: none).
func (c *Comm) anyBound(bound time.Duration) time.Duration {
	if c != nil && c.timeout > 0 && (bound == 0 || c.timeout < bound) {
		return c.timeout
	}
	return bound
}

// deadline is when a wait that starts now passes the communicator's
// timeout (zero: never), for the waits that poll (Probe).
func (c *Comm) deadline() time.Time {
	if c != nil && c.timeout > 0 {
		return time.Now().Add(c.timeout)
	}
	return time.Time{}
}

// abortTimedOut aborts the communicator for a wait that passed its
// timeout, with the report of what was pending (timeoutError), and returns
// that error: every pending request then ends with it.
func (c *Comm) abortTimedOut() error {
	err := c.timeoutError()
	// Every rank's report, before the abort ends theirs: courier run
	// prints them; without it, this rank asks the others (jobreport.go).
	if !reportJob() {
		if job := c.askJob(); job != "" {
			err = fmt.Errorf("%w\n%s", err, job)
		}
	}
	c.conn.Abort(err)
	return err
}

// timeoutError describes this rank's pending operations for the error that
// aborts a communicator whose wait timed out.
func (c *Comm) timeoutError() error {
	pending := c.conn.Pending()
	var b strings.Builder
	where := ""
	if c.parent != nil {
		where = " of " + c.name
	}
	fmt.Fprintf(&b, "a wait on rank %d%s passed the timeout of %v; %d operation(s) pending on rank %d of %s:",
		c.rank, where, c.timeout, len(pending), c.rank, c.name)
	for _, line := range c.reportLines(pending) {
		b.WriteString("\n\t")
		b.WriteString(line)
	}
	return fmt.Errorf("%w: %s", ErrTimeout, b.String())
}
