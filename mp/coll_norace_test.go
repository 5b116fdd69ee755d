//go:build !race

package mp

// raceEnabled: see coll_race_test.go.
const raceEnabled = false
