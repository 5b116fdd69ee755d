package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpinPauseReportsYield: SpinPause reports a pause that gave the core
// away because ranks outnumber the cores, and not the Gosched it makes
// every 64 polls in any case, so that a poll loop knows when its polls
// stop being microseconds (the shared-memory collectives' timeout then
// reads the clock every 16th poll, not every 256th).
func TestSpinPauseReportsYield(t *testing.T) {
	alone, err := New(Options{Rank: 0, Size: 1, LocalRanks: 1})
	require.NoError(t, err)
	defer alone.Close()
	for _, i := range []int{0, 15, 63, 255} {
		assert.False(t, alone.SpinPause(i), "one rank on the host, poll %d", i)
	}

	many, err := New(Options{Rank: 0, Size: 1, LocalRanks: 1 << 20})
	require.NoError(t, err)
	defer many.Close()
	require.True(t, many.yield, "a million ranks outnumber the cores")
	for _, i := range []int{0, 15, 63} {
		assert.True(t, many.SpinPause(i), "ranks outnumber the cores, poll %d", i)
	}
}
