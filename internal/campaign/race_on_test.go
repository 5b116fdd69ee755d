//go:build race

package campaign

// raceOn: the race detector is on; the tests run less of the campaign
// (the ranks are race-built too, and many times slower).
const raceOn = true
