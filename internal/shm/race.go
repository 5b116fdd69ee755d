//go:build race

package shm

// raceEnabled reports a build with the race detector, whose sync/atomic
// stores and loads are release and acquire operations, not sequentially
// consistent ones (Bell.Ring; the tests shorten their loops).
const raceEnabled = true
