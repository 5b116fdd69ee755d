//go:build courier_nccl_wip && !race

package nccl

// raceEnabled: see race_test.go.
const raceEnabled = false
