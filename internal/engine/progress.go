package engine

import (
	"runtime"
	"sync/atomic"
	"time"
)

// engines is the number of engines open in this process (New to Close):
// more than one means ranks that are goroutines of one process.
var engines atomic.Int32

// SpinBudget bounds how long a goroutine in Wait polls the engine's
// pollable transports without finding anything to do before it parks.
// Waking a parked thread costs tens of microseconds on virtual machines
// (docs/benchmarks.md, "Host path"); a ping-pong's reply comes back well
// within the budget, so it is taken without a wake-up. A poll that moves
// something (a large message's chunks, in either direction) starts the
// budget again, so a waiter keeps a transfer going rather than leaving
// each chunk to a goroutine that must be woken. It is spent in full only
// by a wait for a message that is late, on a core the rank would
// otherwise leave idle.
const SpinBudget = 200 * time.Microsecond

// spin polls the engine's transports from the waiting goroutine until r is
// done, the budget passes with nothing to do, or timeout (if positive)
// passes. When ranks outnumber cores it gives the core away between
// polls, so a rank never spins while the rank it waits for cannot run.
func (e *Engine) spin(r *request, timeout time.Duration) { e.SpinUntil(r.isDone, timeout) }

// SpinUntil polls the engine's pollable transports from the calling
// goroutine, as a goroutine in Wait does, until done reports true, the
// spin budget (SpinBudget) passes with nothing moved, or timeout (if
// positive) passes; it reports whether done did. It is for a goroutine
// that waits for something other than one of this engine's requests but
// needs this engine's messages to come (another backend, whose own
// goroutines wait in this engine's receives): polling takes them as they
// arrive, with no goroutine to wake, and the transport's senders are told
// someone polls (they ring no bell). An engine without pollable
// transports returns done() at once.
func (e *Engine) SpinUntil(done func() bool, timeout time.Duration) bool {
	// started has bit k set when poller k may Spin (a rank has a poller
	// per transport kind: two at most).
	var started uint64
	for k, p := range e.pollers {
		if k < 64 && p.SpinStart() {
			started |= 1 << k
		}
	}
	if started == 0 {
		return done()
	}
	var begin, idle time.Time
	active := false
	for i := 0; ; i++ {
		for k, p := range e.pollers {
			if started&(1<<k) != 0 && p.Spin() {
				active = true
			}
		}
		if done() {
			break
		}
		e.SpinPause(i)
		// The clock is read every 16 polls from the 16th on: a reply that
		// comes sooner costs no clock read at all.
		if i&15 == 15 {
			now := time.Now()
			if i == 15 {
				begin, idle = now, now
			} else if timeout > 0 && now.Sub(begin) > timeout {
				break
			}
			if active {
				idle, active = now, false
			} else if now.Sub(idle) > SpinBudget {
				break
			}
		}
	}
	ok := done()
	for k, p := range e.pollers {
		if started&(1<<k) != 0 {
			p.SpinEnd(!ok)
		}
	}
	return ok
}

// SpinPause is what a goroutine polling in a loop does between its polls
// (i counts them from 0): when ranks outnumber cores it gives the core
// away (sched_yield), so a rank never spins while the rank it waits for
// cannot run; it lets the runtime schedule other goroutines every 64
// polls. The shared-memory collectives wait the same way. It reports
// whether it gave the core or the P away because ranks outnumber them
// (not the Gosched every 64 polls): a poll loop whose pauses do cannot
// count its polls as microseconds, since on a loaded machine one such
// pause can last a scheduler's time slice.
func (e *Engine) SpinPause(i int) (yielded bool) {
	// Ranks of one process (goroutines, as tests run them) that outnumber
	// its Ps need them, and sched_yield does not give a P away: each
	// pause hands the P on when several engines are open here, and every
	// 64 pauses otherwise, so other goroutines are never starved. (A
	// Gosched on every pause, in a process of one rank, doubled an
	// 8-byte Allreduce's time on 4 ranks sharing 2 cores.)
	crowded := e.crowded && engines.Load() > 1
	if i&63 == 63 || crowded {
		runtime.Gosched()
	}
	if e.yield {
		osYield()
	}
	return crowded || e.yield
}
