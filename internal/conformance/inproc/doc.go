// Package inproc runs the conformance suite (package conformance) over
// the host backends with every rank a goroutine of the test process
// (internal/ranktest): over TCP on 1 to 7 ranks, over the host backend
// (shared memory between the ranks) on 2 to 4, and with envelope checks.
// Package proctest runs the same suite with every rank a process.
//
// It holds only tests. They live apart from package mp's own, so that
// go test ./... runs the two test binaries side by side.
package inproc
