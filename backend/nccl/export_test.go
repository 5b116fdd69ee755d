package nccl

// RaceEnabled reports whether the tests run under the race detector, for
// the external tests that cut their slowest runs short there.
const RaceEnabled = raceEnabled
