//go:build race

package mp_test

// raceOn: this test binary has the race detector, which makes the
// larger rank counts of some tests too slow for CI's race step.
const raceOn = true
