//go:build !race

package inproc_test

// raceOn: see race_on_test.go.
const raceOn = false
