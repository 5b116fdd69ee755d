package shm

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// wantSeals are the seals Create sets: the size is fixed for good
// (F_SEAL_SEAL: no seal can be added or removed afterwards).
const wantSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Create makes a segment of size bytes, zeroed, and maps it. name is
// only a label: it shows in /proc/PID/fd and /proc/PID/maps as
// "/memfd:NAME (deleted)"; it names nothing another process can open.
//
// With FillAhead the memory is allocated here (fallocate), so a host out
// of memory is an error now rather than at the first touch, and mapped
// with MAP_POPULATE (Map populates too), so neither side takes a page
// fault in its fast path. That costs the whole size at once, and is
// faster afterwards: one-byte messages between two ranks of the 16-core
// host took 0.81 µs one way, 0.90 with the pages allocated but not
// mapped ahead, 0.97 with neither (docs/benchmarks.md). With FillOnTouch
// each page comes at its first touch, so a job's Init and Close cost only
// what its messages used (short jobs: tests).
//
// The segment's descriptor is close-on-exec; pass it with SendFds, then
// drop it with CloseFd when no other process still needs it.
func Create(name string, size int, fill Fill) (*Segment, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shm: segment %q: size %d is not positive", name, size)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return nil, fmt.Errorf("shm: memfd_create: %w (kernel without memfd: %v)", ErrNotSupported, err)
		}
		return nil, fmt.Errorf("shm: memfd_create %q: %w", name, err)
	}
	mem, err := setUp(fd, size, fill)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: segment %q of %d bytes: %w", name, size, err)
	}
	return &Segment{mem: mem, fd: fd}, nil
}

// setUp sizes, allocates (FillAhead), seals and maps the new memfd fd.
func setUp(fd, size int, fill Fill) ([]byte, error) {
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return nil, fmt.Errorf("ftruncate: %w", err)
	}
	if fill == FillAhead {
		if err := unix.Fallocate(fd, 0, 0, int64(size)); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("fallocate: %w", err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, wantSeals); err != nil {
		return nil, fmt.Errorf("sealing: %w", err)
	}
	return mmap(fd, size, fill)
}

func mmap(fd, size int, fill Fill) ([]byte, error) {
	flags := unix.MAP_SHARED
	if fill == FillAhead {
		flags |= unix.MAP_POPULATE
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return mem, nil
}

// Map maps a segment another process created and passed (RecvFds). Its
// size is the file's; the file must be sealed against shrinking (Create
// seals it), so its creator cannot truncate it under this mapping, and
// must not be sealed against writing.
//
// On success the Segment owns fd (CloseFd or Close closes it); on error
// fd is left open, the caller's to close.
func Map(fd int, fill Fill) (*Segment, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: map fd %d: fstat: %w", fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("shm: map fd %d: not a memory file (mode %#o)", fd, st.Mode)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: map fd %d: reading its seals (not a sealable memfd?): %w", fd, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shm: map fd %d: not sealed against shrinking (seals %#x): its creator could truncate it under the mapping", fd, seals)
	}
	if seals&(unix.F_SEAL_WRITE|unix.F_SEAL_FUTURE_WRITE) != 0 {
		return nil, fmt.Errorf("shm: map fd %d: sealed against writing (seals %#x)", fd, seals)
	}
	if st.Size <= 0 || uint64(st.Size) > math.MaxInt {
		return nil, fmt.Errorf("shm: map fd %d: size %d", fd, st.Size)
	}
	mem, err := mmap(fd, int(st.Size), fill)
	if err != nil {
		return nil, fmt.Errorf("shm: map fd %d: %w", fd, err)
	}
	return &Segment{mem: mem, fd: fd}, nil
}

// CloseFd closes the segment's descriptor and keeps the mapping: call it
// once the descriptor has been passed to every process that needs it (or,
// after Map, at once). Once every process has done so, the memory lives
// only as long as its mappings. Calling it again does nothing.
func (s *Segment) CloseFd() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeFd()
}

func (s *Segment) closeFd() error {
	if s.fd < 0 {
		return nil
	}
	fd := s.fd
	s.fd = -1
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("shm: closing segment fd %d: %w", fd, err)
	}
	return nil
}

// Close unmaps the segment and closes its descriptor if CloseFd has not.
// Every slice Bytes returned, and every Ring or Bell in the segment, is
// invalid afterwards. Calling it again does nothing and returns nil.
func (s *Segment) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.mem != nil {
		if e := unix.Munmap(s.mem); e != nil {
			err = fmt.Errorf("shm: unmapping segment: %w", e)
		}
		s.mem = nil
	}
	return errors.Join(err, s.closeFd())
}
