//go:build !race

package shm

// raceEnabled reports a build with the race detector (race.go).
const raceEnabled = false
