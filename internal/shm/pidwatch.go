package shm

import "sync"

// PidWatch notices that a process has exited, without a goroutine: a
// ring cannot tell that its peer died, so a waiter checks Exited now and
// then (between sleeps on its bell, say every 100 ms, to notice a death
// within the 2 s a lost peer must be noticed in). It is safe for
// concurrent use.
type PidWatch struct {
	mu  sync.RWMutex
	fd  int // pidfd, -1 once closed
	pid int
}
