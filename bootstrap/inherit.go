package bootstrap

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The rendezvous socket courier run hands down (COURIER_RENDEZVOUS_FD) is
// the process's for its whole life: every Init of rank 0 serves its
// rendezvous on it, one after another. Detect wraps it once and returns a
// lease on it each time; closing the lease (as Connect does once every
// rank has joined) stops that lease's accepting and leaves the socket
// listening, so that connections of the next Init's ranks wait in its
// backlog until the next lease takes them.

// inherited is one inherited listening socket.
type inherited struct {
	ln   net.Listener
	file *os.File // the descriptor itself, kept open so its number stays this socket's

	accept sync.Mutex // held by the lease that is accepting
	stash  []net.Conn // connections a closed lease accepted, for the next
}

// inheritedSockets are the sockets wrapped so far, by descriptor.
var inheritedSockets struct {
	mu sync.Mutex
	m  map[int]*inherited
}

// inheritedListener returns a new lease on the listening socket inherited
// as descriptor fd, wrapping it the first time.
func inheritedListener(fd int) (net.Listener, error) {
	inheritedSockets.mu.Lock()
	defer inheritedSockets.mu.Unlock()
	s := inheritedSockets.m[fd]
	if s == nil {
		f := os.NewFile(uintptr(fd), "COURIER_RENDEZVOUS_FD")
		if f == nil {
			return nil, errors.New("invalid descriptor")
		}
		ln, err := net.FileListener(f)
		if err == nil {
			if err = checkListening(ln); err != nil {
				ln.Close()
			}
		}
		if err == nil {
			if _, ok := ln.(deadliner); !ok {
				ln.Close()
				err = errors.New("not a socket courier can stop accepting on")
			}
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		s = &inherited{ln: ln, file: f}
		if inheritedSockets.m == nil {
			inheritedSockets.m = map[int]*inherited{}
		}
		inheritedSockets.m[fd] = s
	}
	return &lease{s: s}, nil
}

// deadliner is a listener whose Accept a deadline ends.
type deadliner interface{ SetDeadline(time.Time) error }

// lease is one Init's use of an inherited socket.
type lease struct {
	s      *inherited
	closed atomic.Bool

	mu        sync.Mutex // guards accepting, and the deadline while accepting
	accepting bool
}

// Accept waits for the next connection, taking first those that a closed
// lease accepted too late.
func (l *lease) Accept() (net.Conn, error) {
	s := l.s
	s.accept.Lock()
	defer s.accept.Unlock()
	for {
		if l.closed.Load() {
			return nil, net.ErrClosed
		}
		if len(s.stash) > 0 {
			c := s.stash[0]
			s.stash = s.stash[1:]
			return c, nil
		}
		l.mu.Lock()
		if l.closed.Load() {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		s.ln.(deadliner).SetDeadline(time.Time{})
		l.accepting = true
		l.mu.Unlock()

		c, err := s.ln.Accept()

		l.mu.Lock()
		l.accepting = false
		l.mu.Unlock()
		switch {
		case err == nil && l.closed.Load():
			s.stash = append(s.stash, c)
			return nil, net.ErrClosed
		case err == nil:
			return c, nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			continue // Close ended this wait
		default:
			return nil, err
		}
	}
}

// Close stops this lease's accepting (a pending Accept returns
// net.ErrClosed); the socket goes on listening. It is idempotent.
func (l *lease) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.accepting {
		l.s.ln.(deadliner).SetDeadline(aLongTimeAgo)
	}
	return nil
}

// Addr is the socket's address.
func (l *lease) Addr() net.Addr { return l.s.ln.Addr() }
