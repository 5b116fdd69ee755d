//go:build !race

package nccl

// raceEnabled: see race_test.go.
const raceEnabled = false
