// Package conformance is courier's conformance suite: the
// cases every backend must pass, written against package mp only, so that
// the TCP backend (ranks as goroutines, through internal/ranktest) and the
// NCCL backend (ranks as processes under mpirun) run the same code.
//
// A backend's test calls Run with a Runner that starts n ranks, gives each
// its own communicator, runs a case's body on every rank and reports the
// ranks' failures. Every rank runs the whole body; a case that needs fewer
// ranks than it is given lets the extra ranks return at once.
//
// Cases never wait without a bound: each wait is bounded by the
// communicator's timeout (the harness sets one), and loops that poll have
// their own deadline. A case that needs AnySource or AnyTag accepts
// mp.ErrNotSupported on a backend other than "tcp" and "host", checks that it is that
// error, and ends cleanly on every rank.
package conformance

import (
	"testing"

	"github.com/courier-mp/courier/mp"
)

// T is what a rank's test body needs. *ranktest.T satisfies it, for ranks
// in one process (ranktest.Run) and one rank per process (proctest) alike.
// It satisfies testify's require.TestingT and assert.TestingT. FailNow ends
// the calling rank's body (only from the goroutine that runs it; helper
// goroutines of a case report with Errorf).
type T interface {
	Errorf(format string, args ...any)
	FailNow()
	Helper()
	Logf(format string, args ...any)
}

// Case is one conformance case.
type Case struct {
	// Name is the subtest name, "Area/What" (e.g. "Truncate/Eager").
	Name string
	// MinRanks is the number of ranks the case needs; given more, the ranks
	// it does not use return at once.
	MinRanks int
	// Run is the body every rank runs with its own communicator.
	Run func(t T, c *mp.Comm)
	// Heavy marks a case that moves much data or many messages (a second
	// or more on a slow transport); RunLight leaves it out.
	Heavy bool
}

// Runner runs f on n ranks, each with its own communicator, and reports the
// ranks' failures on t.
//
// Each call must give f fresh communicators, closed after f returns on
// every rank: a rank whose part of a case is done returns while others
// still work, and some cases close or abort their communicator
// (Errors/Close, Errors/Abort, Errors/PeerLost). The communicators should
// have a timeout (mp.WithTimeout or COURIER_TIMEOUT), so that a case
// failing on one rank cannot leave another waiting forever.
type Runner func(t *testing.T, n int, f func(t T, c *mp.Comm))

// Run runs every case as the subtest t.Run(case.Name) on ranks ranks,
// skipping those that need more.
func Run(t *testing.T, ranks int, run Runner) {
	t.Helper()
	runCases(t, ranks, run, "")
}

// RunLight is Run without the heavy cases (Case.Heavy), each skipped
// with a message that names where it runs: for a short-form run of the
// suite on code that another short-form run takes with every case (by
// names that run).
func RunLight(t *testing.T, ranks int, run Runner, by string) {
	t.Helper()
	runCases(t, ranks, run, by)
}

// runCases runs every case, the heavy ones only when light is "" (else
// light says where they run).
func runCases(t *testing.T, ranks int, run Runner, light string) {
	t.Helper()
	for _, cs := range Cases() {
		t.Run(cs.Name, func(t *testing.T) {
			switch {
			case cs.MinRanks > ranks:
				t.Skipf("needs %d ranks, the run has %d", cs.MinRanks, ranks)
			case cs.Heavy && light != "":
				t.Skipf("a heavy case, left to %s in the short form", light)
			}
			run(t, ranks, cs.Run)
		})
	}
}

// Cases returns every case, in a fixed order.
func Cases() []Case {
	var all []Case
	for _, group := range [][]Case{
		groupingCases(),
		typeCases(),
		messageCases(),
		orderCases(),
		wildcardCases(),
		probeCases(),
		selfCases(),
		exchangeCases(),
		requestCases(),
		cancelCases(),
		concurrencyCases(),
		errorCases(),
		barrierCases(),
		collectiveCases(),
		vcollectiveCases(),
		icollectiveCases(),
		valueCases(),
		splitCases(),
	} {
		all = append(all, group...)
	}
	return all
}
