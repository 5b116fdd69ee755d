// Package mptest runs a multi-rank courier program inside one test: each
// rank is a goroutine with its own *mp.Comm, and the ranks talk over the
// real transports (shared memory and TCP over loopback), so a package's
// ordinary `go test` checks its message passing with no launcher:
//
//	func TestHalo(t *testing.T) {
//		mptest.Run(t, 4, func(t *testing.T, c *mp.Comm) {
//			left, right := (c.Rank()+c.Size()-1)%c.Size(), (c.Rank()+1)%c.Size()
//			got := make([]float64, 1)
//			_, err := mp.Sendrecv(c, []float64{float64(c.Rank())}, right, 0, got, left, 0)
//			if err != nil {
//				t.Fatal(err)
//			}
//			if got[0] != float64(left) {
//				t.Errorf("got %v from rank %d", got[0], left)
//			}
//		})
//	}
//
// Each rank runs as a subtest (TestHalo/rank0, TestHalo/rank1, …), so
// its failures carry its rank; t.Fatal in a rank ends that rank and aborts
// its communicator, so the ranks waiting for it fail too instead of
// hanging. A rank that panics is reported with its rank and its stack, and
// aborted likewise; the test binary goes on. The whole run is bounded (by
// WithTimeout, else a minute, or less when the test's own deadline is
// nearer): past it, Run reports what every rank still running waits for
// (Comm.PendingReport: operation, peer, tag, count and the line that
// called it), aborts their communicators and fails the test. When Run
// returns, the ranks' communicators are closed and their goroutines and
// descriptors released.
//
// Go is the same without a test, for examples and programs: it returns
// the ranks' errors joined.
//
// The ranks read no COURIER_ variable of the process environment: the
// backend, the checks and the bound come from the options, so a test
// behaves the same wherever it runs.
//
// # Files
//
//	doc.go      this overview
//	options.go  Option: WithBackend, WithTimeout, WithCheck, WithInitOptions
//	run.go      Run and Go, and the job they share: launch, bound, report
package mptest
