package shm

import "sync"

// Segment is memory shared between processes: an anonymous memory file
// (memfd) mapped MAP_SHARED. It has no name in any file system, so no
// other process can open it: a process gets it only by being passed its
// descriptor (SendFds), and it disappears with the last mapping and
// descriptor, even when every process using it crashes. Nothing ever
// appears in /dev/shm.
//
// The creator seals the file against shrinking and growing before anyone
// maps it, so no process can truncate it under another's mapping (an
// access past the end of a truncated file is SIGBUS, not an error).
//
// A Segment is safe for concurrent use; the memory itself is shared with
// other processes, so what is stored in it is the caller's protocol (see
// Ring and Bell).
type Segment struct {
	mu  sync.Mutex
	mem []byte // nil once closed
	fd  int    // -1 once CloseFd or Close
}

// Bytes returns the segment's memory: len is the segment's size. The
// slice is valid until Close; using it after Close faults.
func (s *Segment) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mem
}

// Fd returns the segment's file descriptor, to pass to another process
// (SendFds), or -1 after CloseFd or Close. The Segment owns it: do not
// close it.
func (s *Segment) Fd() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fd
}

// Fill says when a segment's pages are allocated and mapped (Create, Map).
type Fill uint8

const (
	// FillAhead allocates and maps every page before Create or Map
	// returns: no page faults later, and the fastest small messages.
	FillAhead Fill = iota
	// FillOnTouch leaves each page to its first touch: Create, Map and
	// Close cost only what is used (jobs that live for a moment, as
	// tests' do).
	FillOnTouch
)
