//go:build race

package inproc_test

// raceOn: this test binary has the race detector, which makes the rank
// counts beyond 4 too slow for CI's race step (TestConformanceTCP and
// TestConformanceSHM still run the collectives on 1 to 4 ranks there).
const raceOn = true
