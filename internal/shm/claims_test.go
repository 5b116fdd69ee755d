package shm

import (
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// claimsPair returns two views of one Claims' memory: the owner's and the
// helper's, as two processes would have.
func claimsPair(t testing.TB) (mem []byte, owner, helper *Claims) {
	mem = alignedMem(ClaimsBytes)
	owner, err := NewClaims(mem)
	require.NoError(t, err)
	helper, err = NewClaims(mem)
	require.NoError(t, err)
	return mem, owner, helper
}

// TestClaimsEachChunkOnce: an owner and a helper that take chunks at once,
// range after range, take every chunk exactly once, the helper's from the
// back; the owner's wait on the helper's count (Back, Helped) sees exactly
// the chunks the helper took.
func TestClaimsEachChunkOnce(t *testing.T) {
	_, owner, helper := claimsPair(t)
	type job struct {
		gen uint32
		n   int
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	var helperTook [][]int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for j := range jobs {
			var took []int
			for {
				i, ok := helper.TakeBack(j.gen, j.n)
				if !ok {
					break
				}
				took = append(took, i)
				if i%3 == 0 {
					runtime.Gosched() // let the owner race ahead now and then
				}
				helper.Finish()
			}
			helperTook = append(helperTook, took)
		}
	}()
	var ownerTook [][]int
	for round := range 300 {
		n := 1 + round%17
		gen, err := owner.Begin(n)
		require.NoError(t, err)
		if round%2 == 0 {
			jobs <- job{gen, n} // the helper starts first, or late
		}
		var took []int
		for {
			i, ok := owner.TakeFront()
			if !ok {
				break
			}
			took = append(took, i)
			if round%2 == 1 && len(took) == 1 {
				jobs <- job{gen, n}
			}
		}
		back := owner.Back()
		for {
			done, stopped := owner.Helped()
			require.False(t, stopped)
			require.LessOrEqual(t, done, n-back, "round %d: the helper finished more than it took", round)
			if done == n-back {
				break
			}
			runtime.Gosched()
		}
		require.Len(t, took, back, "round %d: the owner took the front", round)
		for k, i := range took {
			require.Equal(t, k, i, "round %d: the owner takes in order from 0", round)
		}
		ownerTook = append(ownerTook, took)
	}
	close(jobs)
	wg.Wait()
	require.Len(t, helperTook, len(ownerTook))
	helped := 0
	for round, took := range helperTook {
		n := 1 + round%17
		seen := make([]int, n)
		for _, i := range ownerTook[round] {
			seen[i]++
		}
		for k, i := range took {
			assert.Equal(t, n-1-k, i, "round %d: the helper takes in order from the back", round)
			seen[i]++
		}
		for i, s := range seen {
			assert.Equal(t, 1, s, "round %d: chunk %d taken %d times", round, i, s)
		}
		helped += len(took)
	}
	t.Logf("the helper took %d chunks of %d ranges", helped, len(helperTook))
}

// TestClaimsOtherGeneration: a helper told of a range that has ended (the
// owner began another) takes nothing from the next; nor does one whose n
// is smaller than the range's back (memory the other process corrupted).
func TestClaimsOtherGeneration(t *testing.T) {
	mem, owner, helper := claimsPair(t)
	_, ok := helper.TakeBack(0, 4)
	assert.False(t, ok, "memory never written: generation 0 is no one's range")

	old, err := owner.Begin(4)
	require.NoError(t, err)
	gen, err := owner.Begin(4)
	require.NoError(t, err)
	assert.NotEqual(t, old, gen)
	_, ok = helper.TakeBack(old, 4)
	assert.False(t, ok, "an ended range's helper takes from the next")
	_, ok = helper.TakeBack(gen, 3)
	assert.False(t, ok, "a range that does not fit the helper's n")
	i, ok := helper.TakeBack(gen, 4)
	require.True(t, ok)
	assert.Equal(t, 3, i)

	// A range whose front passed its back (written by a broken peer)
	// gives neither side anything.
	word64(mem, 0).Store(packRange(gen, 9, 2))
	_, ok = owner.TakeFront()
	assert.False(t, ok)
	_, ok = helper.TakeBack(gen, 16)
	assert.False(t, ok)
}

// TestClaimsStop: a helper that stops short says so, and its count stays
// what it finished.
func TestClaimsStop(t *testing.T) {
	_, owner, helper := claimsPair(t)
	gen, err := owner.Begin(8)
	require.NoError(t, err)
	for range 3 {
		_, ok := helper.TakeBack(gen, 8)
		require.True(t, ok)
	}
	helper.Finish()
	helper.Finish()
	helper.Stop()
	for {
		if _, ok := owner.TakeFront(); !ok {
			break
		}
	}
	done, stopped := owner.Helped()
	assert.Equal(t, 2, done)
	assert.True(t, stopped)
	assert.Equal(t, 5, owner.Back(), "the helper took 7, 6 and 5, and finished 7 and 6")

	// The next range starts with a clean count.
	_, err = owner.Begin(2)
	require.NoError(t, err)
	done, stopped = owner.Helped()
	assert.Equal(t, 0, done)
	assert.False(t, stopped)
}

// TestClaimsBounds: a range of no chunks or more than MaxClaims is an
// error; so is memory too small or misaligned.
func TestClaimsBounds(t *testing.T) {
	_, owner, _ := claimsPair(t)
	_, err := owner.Begin(0)
	assert.Error(t, err)
	_, err = owner.Begin(MaxClaims + 1)
	assert.Error(t, err)
	gen, err := owner.Begin(MaxClaims)
	require.NoError(t, err)
	assert.NotZero(t, gen)

	_, err = NewClaims(alignedMem(ClaimsBytes - 8))
	assert.Error(t, err)
	_, err = NewClaims(alignedMem(ClaimsBytes + 8)[1:])
	assert.Error(t, err)
}

// TestClaimsGenerationWraps: the generation wraps past its 24 bits to 1,
// never to 0 (the generation of memory never written).
func TestClaimsGenerationWraps(t *testing.T) {
	_, owner, _ := claimsPair(t)
	owner.gen = genMask - 1
	g1, err := owner.Begin(1)
	require.NoError(t, err)
	g2, err := owner.Begin(1)
	require.NoError(t, err)
	assert.Equal(t, uint32(genMask), g1)
	assert.Equal(t, uint32(1), g2)
}
