package mptest

import (
	"time"

	"github.com/courier-mp/courier/mp"
)

// DefaultTimeout bounds a run when WithTimeout does not (and the test's
// deadline is further away).
const DefaultTimeout = time.Minute

// Option adjusts Run and Go.
type Option func(*config)

type config struct {
	backend string
	timeout time.Duration
	check   *bool
	init    []mp.Option
}

// WithBackend picks what carries the ranks' messages:
//
//   - "host" (the default): the host backend, shared memory between the
//     ranks (they are all on this host), as a job on one machine runs;
//   - "shm": the host backend with shared memory alone (COURIER_TRANSPORTS=shm);
//   - "tcp": TCP over loopback between every pair.
//
// Any other registered backend name is passed to mp.WithBackend as it is.
func WithBackend(name string) Option { return func(c *config) { c.backend = name } }

// WithTimeout bounds the whole run, from the ranks' Init to their
// return; zero or less means DefaultTimeout. Past it, Run fails the test
// with every running rank's pending operations and aborts their
// communicators. The bound is also cut to nine tenths of the time left
// before the test's deadline (go test -timeout), so the report comes
// before go test's own panic.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithCheck turns courier's envelope checks on or off (mp.WithCheck; off
// by default, as in a program without COURIER_CHECK): with them, a
// receive whose count differs from the message's, or ranks that call
// different collectives, fail with an error naming both ranks.
func WithCheck(on bool) Option { return func(c *config) { c.check = &on } }

// WithInitOptions adds options to every rank's mp.Init, after the
// harness's own (the job, the backend, the environment), so they may
// override them: mp.WithTimeout, for instance, bounds every wait of the
// ranks (a wait that passes it aborts with the pending operations in its
// error).
func WithInitOptions(opts ...mp.Option) Option {
	return func(c *config) { c.init = append(c.init, opts...) }
}
