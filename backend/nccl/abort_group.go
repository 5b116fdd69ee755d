package nccl

import "sync"

// abortGroup counts the channel aborts in flight (abortChan). Unlike a
// sync.WaitGroup, an abort may start while another goroutine waits: a
// peer lost during Abort's wait, or startWarm's call returning then,
// starts one. wait returns once every abort started before it has ended.
type abortGroup struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0
}

func (g *abortGroup) add() {
	g.mu.Lock()
	if g.n == 0 {
		g.zero = make(chan struct{})
	}
	g.n++
	g.mu.Unlock()
}

func (g *abortGroup) done() {
	g.mu.Lock()
	g.n--
	if g.n == 0 {
		close(g.zero)
	}
	g.mu.Unlock()
}

func (g *abortGroup) wait() {
	g.mu.Lock()
	n, zero := g.n, g.zero
	g.mu.Unlock()
	if n > 0 {
		<-zero
	}
}
