//go:build race

package mp

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts mean nothing in such a build.
const raceEnabled = true
