//go:build linux

package shm

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBellWord(t *testing.T) {
	var w uint32
	b := NewBell(&w)
	assert.False(t, b.Ring(), "not armed")
	assert.Zero(t, w, "an unarmed ring changes nothing")
	v := b.Arm()
	assert.Equal(t, uint32(bellArmed), v)
	assert.Equal(t, v, b.Arm(), "arming twice is arming")
	b.Disarm()
	assert.Zero(t, w)
	assert.False(t, b.Ring())

	v = b.Arm()
	assert.True(t, b.Ring())
	assert.Equal(t, uint32(1), w, "the ring cleared the bit and counted")
	start := time.Now()
	require.NoError(t, b.Sleep(v, 5*time.Second), "a ring before the sleep")
	assert.Less(t, time.Since(start), time.Second, "it returns at once")
	assert.False(t, b.Ring(), "one ring per arm")

	// The count keeps an old value from coming back: a sleep on the first
	// arm's value returns at once after another arm.
	v1 := b.Arm()
	b.Ring()
	v2 := b.Arm()
	assert.NotEqual(t, v1, v2)
	require.NoError(t, b.Sleep(v1, 5*time.Second))
	assert.Less(t, time.Since(start), time.Second)

	// Nobody rings: the timeout bounds the sleep; 0 does not sleep.
	start = time.Now()
	require.NoError(t, b.Sleep(v2, 30*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 25*time.Millisecond)
	start = time.Now()
	require.NoError(t, b.Sleep(v2, 0))
	assert.Less(t, time.Since(start), 20*time.Millisecond)

	// The count wraps within its 31 bits, never touching the armed bit.
	w = bellSeq
	b.Arm()
	assert.True(t, b.Ring())
	assert.Zero(t, w)
}

func TestBellWakesSleeper(t *testing.T) {
	var w uint32
	b := NewBell(&w)
	v := b.Arm()
	woke := make(chan time.Duration)
	go func() {
		start := time.Now()
		b.Sleep(v, -1)
		woke <- time.Since(start)
	}()
	time.Sleep(50 * time.Millisecond)
	require.True(t, b.Ring())
	select {
	case d := <-woke:
		assert.GreaterOrEqual(t, d, 40*time.Millisecond, "it slept until the ring")
	case <-time.After(5 * time.Second):
		t.Fatal("the sleeper was not woken")
	}
}

func TestBellNoAllocs(t *testing.T) {
	var w uint32
	b := NewBell(&w)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { b.Ring() }))
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		v := b.Arm()
		b.Ring()
		b.Sleep(v, time.Second)
	}))
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		b.Sleep(b.Arm(), time.Microsecond)
	}), "a sleep that times out")
}

// pingPong is one side of a bell ping-pong: for each round it waits, by
// the bell's protocol and never spinning, until the peer's counter reaches
// the round (or, when first, starts the round), then sets its own, rings
// the peer, and records that its ring for the round has returned (rang).
// It returns how many sleeps ran into their timeout, and of those how many
// were lost wake-ups: the peer's counter there, the peer's ring for that
// round returned (theirRang), and the bell's word still as this side armed
// it. By the protocol that cannot be: the side armed before it looked at
// the peer's counter and found it short, so the peer set its counter after
// the arming and its ring saw the bell armed, and moved the word on. A
// sleep that merely lasted (a loaded machine holding the peer between its
// counter and its ring) is not one, however long the peer takes: the check
// waits for the ring's return, up to ringWait. Callers allow one such
// stall per side, and no lost wake-up. (The check found real ones: under
// the race detector, whose atomic stores are release stores, until Ring
// made its look a read-modify-write there.)
type pingSide struct {
	mine, theirs    *atomic.Uint32 // the round each side has reached
	rang, theirRang *atomic.Uint32 // the round each side's ring has returned for
	me, peer        Bell
}

func pingPong(rounds int, first bool, s pingSide) (sleeps, timeouts, lost int, err error) {
	for i := 1; i <= rounds; i++ {
		want := uint32(i)
		if first {
			want = uint32(i - 1)
		}
		for s.theirs.Load() != want {
			v := s.me.Arm()
			if s.theirs.Load() == want {
				s.me.Disarm()
				break
			}
			start := time.Now()
			if err := s.me.Sleep(v, bellTimeout); err != nil {
				return sleeps, timeouts, lost, err
			}
			sleeps++
			if time.Since(start) >= bellTimeout {
				timeouts++
				if s.theirs.Load() == want && ringReturned(s.theirRang, want) && atomic.LoadUint32(s.me.w) == v {
					lost++
				}
			}
		}
		s.mine.Store(uint32(i))
		s.peer.Ring()
		s.rang.Store(uint32(i))
	}
	return sleeps, timeouts, lost, nil
}

// ringReturned waits until the peer's ring for round want has returned, up
// to ringWait, and reports whether it has.
func ringReturned(rang *atomic.Uint32, want uint32) bool {
	deadline := time.Now().Add(ringWait)
	for rang.Load() < want {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// ringWait bounds ringReturned's wait: a peer held that long between its
// counter and its ring's return is a stalled machine, not a lost wake-up.
const ringWait = 30 * time.Second

// TestBellGoroutines plays many rounds of bell ping-pong between two
// goroutines: every round both sleep, and no sleep runs into its timeout.
func TestBellGoroutines(t *testing.T) {
	rounds := 20_000
	if testing.Short() || raceEnabled {
		rounds = 3_000
	}
	var wa, wb uint32
	var ca, cb, ra, rb atomic.Uint32
	a, b := NewBell(&wa), NewBell(&wb)
	var wg sync.WaitGroup
	var bSleeps, bTimeouts, bLost int
	var bErr error
	wg.Go(func() {
		bSleeps, bTimeouts, bLost, bErr = pingPong(rounds, false, pingSide{mine: &cb, theirs: &ca, rang: &rb, theirRang: &ra, me: b, peer: a})
	})
	start := time.Now()
	aSleeps, aTimeouts, aLost, err := pingPong(rounds, true, pingSide{mine: &ca, theirs: &cb, rang: &ra, theirRang: &rb, me: a, peer: b})
	wg.Wait()
	require.NoError(t, err)
	require.NoError(t, bErr)
	t.Logf("%d rounds in %v (%v per one-way wake-up); sleeps %d and %d", rounds, time.Since(start),
		time.Since(start)/time.Duration(2*rounds), aSleeps, bSleeps)
	assert.Zero(t, aLost+bLost, "lost wake-ups")
	assert.LessOrEqual(t, aTimeouts+bTimeouts, 2, "sleeps that ran into their timeout")
	assert.Equal(t, uint32(rounds), ca.Load())
	assert.Equal(t, uint32(rounds), cb.Load())
	assert.Greater(t, aSleeps+bSleeps, rounds/2, "the sides slept, mostly")
}

func init() {
	roles["bell"] = func(conn *net.UnixConn, args []string) error {
		p, _, err := childPair(conn)
		if err != nil {
			return err
		}
		sleeps, timeouts, lost, err := pingPong(atoi(args[0]), false, pingSide{
			mine: p.counter(offCountC), theirs: p.counter(offCountP),
			rang: p.counter(offRangC), theirRang: p.counter(offRangP),
			me: p.me, peer: p.peer,
		})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(conn, sleeps, timeouts, lost)
		return err
	}
}

// TestBellProcesses plays bell ping-pong between two processes, the words
// in a shared segment.
func TestBellProcesses(t *testing.T) {
	rounds := 10_000
	if testing.Short() || raceEnabled {
		rounds = 2_000
	}
	p, c := startPair(t, "bell", 4096, fmt.Sprint(rounds))
	theirs := p.counter(offCountC)
	start := time.Now()
	sleeps, timeouts, lost, err := pingPong(rounds, true, pingSide{
		mine: p.counter(offCountP), theirs: theirs,
		rang: p.counter(offRangP), theirRang: p.counter(offRangC),
		me: p.me, peer: p.peer,
	})
	require.NoError(t, err)
	var cSleeps, cTimeouts, cLost int
	_, err = fmt.Sscan(c.line(t), &cSleeps, &cTimeouts, &cLost)
	require.NoError(t, err)
	c.wait(t)
	t.Logf("%d rounds in %v (%v per one-way wake-up); sleeps %d and %d", rounds, time.Since(start),
		time.Since(start)/time.Duration(2*rounds), sleeps, cSleeps)
	assert.Zero(t, lost+cLost, "lost wake-ups")
	assert.LessOrEqual(t, timeouts+cTimeouts, 2, "sleeps that ran into their timeout")
	assert.Equal(t, uint32(rounds), theirs.Load())
	assert.Greater(t, sleeps+cSleeps, rounds/2, "the sides slept, mostly")
}
