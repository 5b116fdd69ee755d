//go:build !race

package campaign

const raceOn = false
