package mp

import "github.com/courier-mp/courier/backend/tcp"

// CollThresholds lists every size of the thresholds table (colltune.go),
// for the external test that checks the conformance suite tries sizes on
// both sides of each.
func CollThresholds() []int64 {
	var all []int64
	for _, t := range [][]switchPoint{allreduceRD, allreduceTree, allgatherSmall, reduceScatterSmall, scanRD} {
		for _, row := range t {
			all = append(all, row.bytes)
		}
	}
	return all
}

// RaceEnabled reports a build with the race detector, where the external
// tests cut their slowest runs short.
const RaceEnabled = raceEnabled

// SharedCollectives is the number of collectives c's rank has run through
// shared memory (the host backend, every rank on this host).
func SharedCollectives(c *Comm) int64 { return tcp.SharedCollectives(c.conn) }

// ForceScan makes Scan and Exscan take recursive doubling (rd) or the
// chain (!rd) at every size, for the benchmark that compares them, and
// returns the function that puts the table back.
func ForceScan(rd bool) (restore func()) {
	old := scanRD
	scanRD = []switchPoint{{anyRanks, 0}}
	if rd {
		scanRD = []switchPoint{{anyRanks, 1 << 62}}
	}
	return func() { scanRD = old }
}
