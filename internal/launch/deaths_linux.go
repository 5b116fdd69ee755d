package launch

import (
	"sync"

	"golang.org/x/sys/unix"
)

// deaths records the order in which the ranks' processes die, as the
// kernel sees it: a pidfd becomes readable when its process exits, before
// it is reaped and before its output has drained. A rank killed while a
// process it started holds its output open is reaped late, after the
// survivors that exited because they saw it die; this order still puts
// it first. One goroutine waits on every pidfd at once (epoll).
type deaths struct {
	epfd, wake int
	done       chan struct{}
	notify     chan struct{} // a death was recorded (a token, never blocks)

	mu   sync.Mutex
	fds  map[int32]int // pidfd → rank
	seq  map[int]int   // rank → its place in the order of deaths
	next int
}

// newDeaths starts the watcher; nil where the kernel offers no pidfds
// (the launcher then goes by the order in which it reaps the ranks).
func newDeaths() *deaths {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil
	}
	if unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}) != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil
	}
	d := &deaths{epfd: epfd, wake: wake, done: make(chan struct{}), notify: make(chan struct{}, 1),
		fds: map[int32]int{}, seq: map[int]int{}}
	go d.loop()
	return d
}

// add watches rank's process pid; it reports false if it cannot.
func (d *deaths) add(rank, pid int) bool {
	if d == nil {
		return false
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	d.mu.Lock()
	d.fds[int32(fd)] = rank
	d.mu.Unlock()
	if unix.EpollCtl(d.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}) != nil {
		d.mu.Lock()
		delete(d.fds, int32(fd))
		d.mu.Unlock()
		unix.Close(fd)
		return false
	}
	return true
}

func (d *deaths) loop() {
	defer close(d.done)
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(d.epfd, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		recorded := false
		for _, ev := range events[:n] {
			if ev.Fd == int32(d.wake) {
				return
			}
			d.mu.Lock()
			rank, ok := d.fds[ev.Fd]
			if ok {
				delete(d.fds, ev.Fd)
				d.seq[rank] = d.next
				d.next++
				recorded = true
			}
			d.mu.Unlock()
			unix.EpollCtl(d.epfd, unix.EPOLL_CTL_DEL, int(ev.Fd), nil)
			unix.Close(int(ev.Fd))
		}
		if recorded {
			select {
			case d.notify <- struct{}{}:
			default:
			}
		}
	}
}

// order returns rank's place in the order of deaths, if it has died and
// was watched.
func (d *deaths) order(rank int) (int, bool) {
	if d == nil {
		return 0, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.seq[rank]
	return s, ok
}

// watching reports whether rank's death will be recorded.
func (d *deaths) watching(rank int) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seq[rank]; ok {
		return true
	}
	for _, r := range d.fds {
		if r == rank {
			return true
		}
	}
	return false
}

// notified is a channel that receives a token after deaths are recorded.
func (d *deaths) notified() <-chan struct{} {
	if d == nil {
		return nil
	}
	return d.notify
}

// close stops the watcher and releases its descriptors.
func (d *deaths) close() {
	if d == nil {
		return
	}
	var one [8]byte
	one[0] = 1 // the eventfd counter is a host-order uint64; 1 in either order wakes it
	unix.Write(d.wake, one[:])
	<-d.done
	d.mu.Lock()
	for fd := range d.fds {
		unix.Close(int(fd))
	}
	clear(d.fds)
	d.mu.Unlock()
	unix.Close(d.epfd)
	unix.Close(d.wake)
}
