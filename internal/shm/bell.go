package shm

import (
	"sync/atomic"
	"time"
)

// The bell word: the top bit says a sleeper wants a wake-up (armed), the
// other 31 bits count the rings.
const (
	bellArmed = 1 << 31
	bellSeq   = bellArmed - 1
)

// Bell is a doorbell on a 32-bit word in shared memory: one consumer (a
// process, waiting for records in its rings) sleeps on it, and any
// producer rings it after committing a record. It costs a producer one
// atomic load when nobody sleeps, and a system call (FUTEX_WAKE) only
// when the consumer has armed it.
//
// The consumer's wait, and the invariant that no wake-up is lost:
//
//	for {
//		if a ring has a record { handle it; continue }
//		… spin a little, re-checking …
//		v := bell.Arm()                  // 1. arm
//		if a ring has a record {         // 2. re-check every ring
//			bell.Disarm(); continue
//		}
//		bell.Sleep(v, timeout)           // 3. sleep while the word is v
//	}
//
// and the producer's, after ring.Commit(): bell.Ring(). Arm is an atomic
// read-modify-write of the word and Ring's first step an atomic load of
// it; the ring indices are sequentially consistent atomics too. So either
// the producer's load comes after the Arm and sees the armed bit (it then
// changes the word and wakes: Sleep(v) returns at once or is woken), or
// it comes before the Arm, and then so did its Commit, and the consumer's
// re-check in step 2 sees the record. Ring bumps the count as it clears
// the armed bit, so the word does not return to a value a sleeper still
// holds (not for 2^31 rings): a ring between steps 1 and 3 always makes
// Sleep return.
// A producer waiting for room follows the same protocol on its own bell,
// with the consumer ringing it after Consume (see Ring.WantSpace).
//
// One goroutine at a time sleeps on a bell (a process's progress loop,
// waiting for records and for room alike): a second sleeper's Disarm could
// clear the armed bit under the first, whose wake-up would then be lost.
// Any number of producers may ring it.
//
// A Bell is a pointer to its word: copy it freely. The word must be
// 4-byte aligned and inside shared memory that both processes map (a
// Segment), zero or left by earlier use of the bell.
type Bell struct {
	w *uint32
}

// NewBell returns the bell on word, which lies in a Segment.
func NewBell(word *uint32) Bell { return Bell{w: word} }

// Arm is the consumer's first step before sleeping: it sets the armed bit
// and returns the word's value to pass to Sleep.
func (b Bell) Arm() uint32 {
	return atomic.OrUint32(b.w, bellArmed) | bellArmed
}

// Armed reports whether the bell is armed (one load): a consumer that is
// about to spin disarms it only then, and so never writes the word, which
// every producer reads, while no one sleeps.
func (b Bell) Armed() bool { return atomic.LoadUint32(b.w)&bellArmed != 0 }

// Rings counts the rings that found the bell armed (each one a wake-up
// system call), modulo 2^31: a test or a report can tell how often
// producers woke the consumer.
func (b Bell) Rings() uint32 { return atomic.LoadUint32(b.w) & bellSeq }

// Disarm clears the armed bit, when the consumer found work after Arm (or
// goes back to spinning): producers then stop making system calls.
func (b Bell) Disarm() {
	atomic.AndUint32(b.w, bellSeq)
}

// Sleep blocks the calling goroutine (and its thread, in the kernel) while
// the word equals v, the value Arm returned, for at most timeout (a
// negative timeout has no bound; 0 returns at once). It returns nil when
// it was woken, when the word had already changed (a ring came before the
// sleep), when it timed out, and when a signal interrupted it: the caller
// re-checks its rings, and its clock, in every case. The wait is a shared
// FUTEX_WAIT (not _PRIVATE), keyed by the memory itself, so a producer in
// another process wakes it.
func (b Bell) Sleep(v uint32, timeout time.Duration) error {
	if atomic.LoadUint32(b.w) != v || timeout == 0 {
		return nil
	}
	return futexWait(b.w, v, timeout)
}

// Ring wakes the consumer if it armed the bell: it clears the armed bit,
// bumps the count and wakes every sleeper on the word (FUTEX_WAKE). It
// reports whether the bell was armed; a sleeper may not have reached
// Sleep yet, and then its Sleep returns at once. When the bell is not
// armed, Ring is one atomic load.
//
// Built with the race detector, that load is an atomic add of 0 instead:
// there sync/atomic's stores are release stores (an ordinary MOV on
// amd64), so the producer's store of what it publishes could pass Ring's
// load of the word, still in the core's store buffer, and both sides miss
// the other (Dekker's pattern, as the protocol above says); the
// read-modify-write is a full barrier. TestBellProcesses lost a wake-up in
// about one run of three under -race before.
func (b Bell) Ring() bool {
	for {
		var old uint32
		if raceEnabled {
			old = atomic.AddUint32(b.w, 0)
		} else {
			old = atomic.LoadUint32(b.w)
		}
		if old&bellArmed == 0 {
			return false
		}
		if atomic.CompareAndSwapUint32(b.w, old, (old+1)&bellSeq) {
			futexWake(b.w)
			return true
		}
	}
}
