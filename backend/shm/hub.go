package shm

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-mp/courier/internal/engine"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// Hub is one rank's shared-memory transport: its inbox (a segment holding
// its doorbell and one ring per rank of this host, which those ranks
// fill), its links, and the progress goroutine that takes arrivals when no
// waiter polls. It is the engine's Poller.
//
// Waking: a rank that has nothing to do arms its bell and sleeps on it; a
// sender rings the bell after it fills a ring, which costs one load when
// the bell is not armed. While a waiter polls (SpinStart to SpinEnd), the
// bell is disarmed, so senders make no system call and the progress
// goroutine is not woken per message.
type Hub struct {
	copy   Copy       // Options.Copy
	copyIn CopyIn     // Options.CopyIn
	fill   shmem.Fill // Options.Fill
	e      *engine.Engine
	inbox  *shmem.Segment
	bell   shmem.Bell
	links  []*link
	coll   *Coll         // nil unless every rank of the job is on this host
	spin   atomic.Uint64 // waiters polling now (low 32 bits), and SpinStarts ever (high 32)
	// armWanted: a waiter parked while others polled, so the bell was not
	// armed for it; the last of them to stop kicks the progress goroutine.
	armWanted atomic.Bool
	tick      atomic.Int64 // progressTick, as this hub uses it (tests change it)
	live      atomic.Int32 // links not yet killed
	stop      chan struct{}
	kick      chan struct{} // capacity 1: ends the progress goroutine's tick (SpinEnd)
	endOnce   sync.Once

	// Ring memory is unmapped only when nothing can touch it: every user
	// of it counts itself in active, and after closed is set nobody new
	// enters.
	active   atomic.Int32
	closed   atomic.Bool
	watchers sync.WaitGroup
}

// enter counts a user of the rings; false once they are being unmapped.
func (h *Hub) enter() bool {
	h.active.Add(1)
	if h.closed.Load() {
		h.active.Add(-1)
		return false
	}
	return true
}

func (h *Hub) exit() { h.active.Add(-1) }

// idleSleep bounds the progress goroutine's sleep on its bell: a backstop,
// since every arrival rings it (and so do a link's end and Close). Each
// wake costs the rank more than its few instructions: with each rank bound
// to a core (as mpirun binds them), a loop of 8-byte Allreduces through
// shared memory, whose waiters poll without waking this goroutine, lost
// 17 ms in every 100 (0.69 µs a call against 0.58 with a second here; a
// 2-core AMD VM, docs/benchmarks.md, 2026-12-05, third session).
const idleSleep = time.Second

// progressTick is how often the progress goroutine looks while waiters
// spin (they take arrivals themselves): the longest an arrival waits after
// the last waiter stops, before this goroutine takes it, when no waiter
// is parked.
const progressTick = time.Millisecond

// Poll implements engine.Poller.
func (h *Hub) Poll() bool {
	if !h.enter() {
		return false
	}
	defer h.exit()
	return h.Spin()
}

// Spin implements engine.Poller: Poll without the count of users, which
// SpinStart took for the whole spin.
func (h *Hub) Spin() bool {
	did := false
	for _, l := range h.links {
		if l.poll() {
			did = true
		}
	}
	return did
}

// SpinStart implements engine.Poller: the spinner counts itself a user of
// the rings until SpinEnd, so its polls take no count of their own.
//
// The first spinner of a rank that was idle finds the bell armed, with the
// progress goroutine asleep on it: it rings the bell itself (one system
// call), so the progress goroutine wakes, sees the spinner and goes back to
// looking every progressTick with the bell disarmed. Senders then make no
// system call, and the bell's word, which they read on every message, is
// not written again while the rank keeps polling.
func (h *Hub) SpinStart() bool {
	if !h.enter() {
		return false
	}
	if uint32(h.spin.Add(spinOne)) == 1 && h.bell.Armed() {
		h.bell.Ring()
	}
	return true
}

// spinOne counts one SpinStart: one more spinner and one more start.
const spinOne = 1<<32 | 1

// SpinEnd implements engine.Poller. A spinner that parks (its request is
// not done) kicks the progress goroutine, which then arms the bell at once,
// so the arrival the parked waiter needs rings it. One that ends with its
// request done leaves the bell as it is: the progress goroutine arms it
// only after a whole progressTick in which no waiter polled (see
// progress), so a ping-pong, whose waiters poll from one message to the
// next with short gaps between, never arms it and never writes its word.
//
// A waiter that parks while others poll is covered by their polls (they
// take every arrival) until the last of them stops: that one kicks the
// progress goroutine then (armWanted), whether it parks or not.
func (h *Hub) SpinEnd(parking bool) {
	if parking {
		// Before the count: the last waiter to stop (this one, or one
		// whose SpinEnd comes after) sees it.
		h.armWanted.Store(true)
	}
	if uint32(h.spin.Add(^uint64(0))) == 0 && h.armWanted.Load() && h.armWanted.Swap(false) {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
	h.exit()
}

// progress takes arrivals when no waiter does: it polls while there is
// work, looks every progressTick while waiters poll or did since its last
// look, and otherwise arms the bell and sleeps on it.
func (h *Hub) progress() {
	var tick *time.Timer
	var seen uint64 // h.spin at the last look
	for {
		select {
		case <-h.stop:
			h.unmap()
			return
		default:
		}
		if h.Poll() {
			continue
		}
		if s := h.spin.Load(); uint32(s) > 0 || s != seen {
			// A waiter polls, or did since the last look: look again
			// later (or when a waiter parks) without asking senders to
			// wake this goroutine.
			seen = s
			if tick == nil {
				tick = time.NewTimer(time.Duration(h.tick.Load()))
			} else {
				tick.Reset(time.Duration(h.tick.Load()))
			}
			kicked := false
			select {
			case <-tick.C:
			case <-h.kick:
				tick.Stop()
				kicked = true
			case <-h.stop:
				tick.Stop()
			}
			if !kicked {
				continue
			}
			// A waiter parked: arm the bell now, or, while other
			// waiters poll (they cover it), once the last of them stops
			// (armWanted, then a look at the count: whichever of this
			// and that waiter's SpinEnd comes second sees the other).
			if uint32(h.spin.Load()) > 0 {
				// A swap, not a store: the look at the count below must
				// not pass it (Dekker's pattern with SpinEnd's), and
				// built with the race detector a store would be a
				// release store (shmem.Bell.Ring); elsewhere both are
				// one exchange.
				h.armWanted.Swap(true)
				if uint32(h.spin.Load()) > 0 {
					continue
				}
				h.armWanted.Store(false)
			}
		}
		v := h.bell.Arm()
		seen = h.spin.Load()
		if h.Poll() || uint32(seen) > 0 {
			h.bell.Disarm()
			continue
		}
		h.bell.Sleep(v, idleSleep)
	}
}

// linkDone counts an ended link. After the last, once this rank is
// closing, the progress goroutine ends and the memory is unmapped: not
// before, since the peers' collective areas stay readable after they
// leave (a Bcast's root may close before the others read its part), and
// this rank's collectives learn of a departed writer from its link.
func (h *Hub) linkDone() {
	if h.live.Add(-1) == 0 && h.e.Closing() {
		h.end()
	}
}

// end stops the progress goroutine, which unmaps the memory; once.
func (h *Hub) end() {
	h.endOnce.Do(func() {
		close(h.stop)
		if h.enter() {
			h.bell.Ring()
			h.exit()
		}
	})
}

// unmap releases the inbox and the peers' segments once the watchers have
// returned and no poller is inside.
func (h *Hub) unmap() {
	h.watchers.Wait()
	h.closed.Store(true)
	for h.active.Load() != 0 {
		time.Sleep(10 * time.Microsecond)
	}
	for _, l := range h.links {
		l.peerSeg.Close()
	}
	h.inbox.Close()
}
