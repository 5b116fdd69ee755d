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
	copy     Copy       // Options.Copy
	fill     shmem.Fill // Options.Fill
	e        *engine.Engine
	inbox    *shmem.Segment
	bell     shmem.Bell
	links    []*link
	coll     *Coll // nil unless every rank of the job is on this host
	spinners atomic.Int32
	disarmed atomic.Bool  // a spinner disarmed the bell the progress goroutine sleeps on
	live     atomic.Int32 // links not yet killed
	stop     chan struct{}
	kick     chan struct{} // capacity 1: ends the progress goroutine's tick (SpinEnd)
	endOnce  sync.Once

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
// since every arrival rings it.
const idleSleep = 100 * time.Millisecond

// progressTick is how often the progress goroutine looks while waiters
// spin (they take arrivals themselves): the longest an arrival waits after
// the last waiter stops, before this goroutine takes it.
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
func (h *Hub) SpinStart() bool {
	if !h.enter() {
		return false
	}
	if h.spinners.Add(1) == 1 && h.bell.Armed() {
		h.bell.Disarm()
		h.disarmed.Store(true)
	}
	return true
}

// SpinEnd implements engine.Poller: the progress goroutine takes arrivals
// again. If a spinner disarmed the bell under it (it sleeps on the bell),
// the bell is armed again, and what came after the last poll and before
// that is taken here; otherwise the progress goroutine, which looks every
// progressTick while waiters spin, arms it itself: at once when the
// spinner parks (its request's arrival must ring the bell), else at its
// next look. So a ping-pong, whose waiter spins from one message to the
// next, never writes the bell's word, which the sender reads on every
// message.
func (h *Hub) SpinEnd(parking bool) {
	if h.spinners.Add(-1) == 0 {
		if h.disarmed.Load() && h.disarmed.Swap(false) {
			h.bell.Arm()
			h.Spin()
		} else if parking {
			select {
			case h.kick <- struct{}{}:
			default:
			}
		}
	}
	h.exit()
}

// progress takes arrivals when no waiter does: it polls while there is
// work, and sleeps on the bell when there is none.
func (h *Hub) progress() {
	var tick *time.Timer
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
		if h.spinners.Load() > 0 {
			// A waiter polls; look again later (or when it parks)
			// without asking senders to wake this goroutine.
			if tick == nil {
				tick = time.NewTimer(progressTick)
			} else {
				tick.Reset(progressTick)
			}
			select {
			case <-tick.C:
			case <-h.kick:
				tick.Stop()
			case <-h.stop:
				tick.Stop()
			}
			continue
		}
		v := h.bell.Arm()
		if h.Poll() {
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
