//go:build !race

package mp_test

// raceOn: see race_on_test.go.
const raceOn = false
