//go:build !linux

package shm

// Create makes a shared memory segment; it needs Linux (memfd_create).
// Here it returns an error wrapping ErrNotSupported.
func Create(name string, size int, fill Fill) (*Segment, error) {
	return nil, notSupported("shared memory segments")
}

// Map maps a segment passed by another process; it needs Linux. Here it
// returns an error wrapping ErrNotSupported.
func Map(fd int, fill Fill) (*Segment, error) {
	return nil, notSupported("shared memory segments")
}

// CloseFd closes the segment's descriptor; no segment exists here, so it
// returns an error wrapping ErrNotSupported.
func (s *Segment) CloseFd() error {
	return notSupported("shared memory segments")
}

// Close unmaps the segment; no segment exists here, so it returns an
// error wrapping ErrNotSupported.
func (s *Segment) Close() error {
	return notSupported("shared memory segments")
}
