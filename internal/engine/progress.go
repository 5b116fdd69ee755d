package engine

import (
	"runtime"
	"time"
)

// SpinBudget bounds how long a goroutine in Wait polls the engine's
// pollable transports before it parks. Waking a parked thread costs tens
// of microseconds on virtual machines (docs/benchmarks.md, "Host path");
// a ping-pong's reply comes back well within the budget, so it is taken
// without a wake-up. It is spent in full only by a wait for a message that
// is late, on a core the rank would otherwise leave idle.
const SpinBudget = 200 * time.Microsecond

// spin polls the engine's transports from the waiting goroutine until r is
// done, the budget is spent, or timeout (if positive) passes. When ranks
// outnumber cores it gives the core away between polls, so a rank never
// spins while the rank it waits for cannot run.
func (e *Engine) spin(r *request, timeout time.Duration) {
	budget := SpinBudget
	if timeout > 0 && timeout < budget {
		budget = timeout
	}
	for _, p := range e.pollers {
		p.SpinStart()
	}
	var start time.Time
	for i := 0; ; i++ {
		for _, p := range e.pollers {
			p.Poll()
		}
		if r.isDone() {
			break
		}
		e.SpinPause(i)
		if i&15 == 0 {
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) > budget {
				break
			}
		}
	}
	for _, p := range e.pollers {
		p.SpinEnd()
	}
}

// SpinPause is what a goroutine polling in a loop does between its polls
// (i counts them from 0): when ranks outnumber cores it gives the core
// away (sched_yield), so a rank never spins while the rank it waits for
// cannot run; otherwise it lets the runtime schedule other goroutines
// every 64 polls. The shared-memory collectives wait the same way.
func (e *Engine) SpinPause(i int) {
	if e.yield {
		osYield()
	} else if i&63 == 63 {
		runtime.Gosched()
	}
}
