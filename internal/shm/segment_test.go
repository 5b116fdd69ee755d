//go:build linux

package shm

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestSegmentSealed: a segment is zeroed, sealed at its size, close-on-exec,
// and a second mapping of it is the same memory, whichever the fill.
func TestSegmentSealed(t *testing.T) {
	for _, fill := range []Fill{FillAhead, FillOnTouch} {
		t.Run([]string{"ahead", "on-touch"}[fill], func(t *testing.T) { segmentSealed(t, fill) })
	}
}

func segmentSealed(t *testing.T, fill Fill) {
	s, err := Create("courier-test-seals", 10000, fill)
	require.NoError(t, err)
	defer s.Close()
	assert.Len(t, s.Bytes(), 10000)
	assert.Equal(t, make([]byte, 10000), s.Bytes(), "zeroed")

	// Neither shrinking nor growing, nor unsealing: the size is final.
	fd := s.Fd()
	assert.ErrorIs(t, unix.Ftruncate(fd, 4096), unix.EPERM)
	assert.ErrorIs(t, unix.Ftruncate(fd, 0), unix.EPERM)
	assert.ErrorIs(t, unix.Ftruncate(fd, 1<<20), unix.EPERM)
	assert.ErrorIs(t, unix.Fallocate(fd, 0, 0, 1<<20), unix.EPERM)
	_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE)
	assert.ErrorIs(t, err, unix.EPERM)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	require.NoError(t, err)
	assert.Equal(t, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL, seals)
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	require.NoError(t, err)
	assert.NotZero(t, flags&unix.FD_CLOEXEC)

	// A second mapping of the same file is the same memory.
	dup, err := unix.Dup(fd)
	require.NoError(t, err)
	m, err := Map(dup, fill)
	require.NoError(t, err)
	copy(s.Bytes()[9990:], "0123456789")
	assert.Equal(t, "0123456789", string(m.Bytes()[9990:]))
	require.NoError(t, m.CloseFd())
	assert.Equal(t, -1, m.Fd())
	require.NoError(t, m.CloseFd(), "again")
	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "again")
	assert.Nil(t, m.Bytes())

	require.NoError(t, s.CloseFd())
	assert.Equal(t, "0123456789", string(s.Bytes()[9990:]), "the mapping outlives the descriptor")
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())

	_, err = Create("x", 0, FillAhead)
	assert.Error(t, err)
}

// TestMapRefuses checks that Map takes only what Create makes: a memory
// file sealed against shrinking, and writable.
func TestMapRefuses(t *testing.T) {
	memfd := func(seals int) int {
		fd, err := unix.MemfdCreate("courier-test-unsealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		require.NoError(t, err)
		require.NoError(t, unix.Ftruncate(fd, 8192))
		if seals != 0 {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
			require.NoError(t, err)
		}
		return fd
	}
	for seals, want := range map[int]string{
		0:                                      "not sealed against shrinking",
		unix.F_SEAL_GROW:                       "not sealed against shrinking",
		unix.F_SEAL_SHRINK | unix.F_SEAL_WRITE: "sealed against writing",
		unix.F_SEAL_SHRINK | unix.F_SEAL_FUTURE_WRITE: "sealed against writing",
	} {
		fd := memfd(seals)
		_, err := Map(fd, FillAhead)
		assert.ErrorContains(t, err, want, "seals %#x", seals)
		require.NoError(t, unix.Close(fd), "a failed Map leaves the descriptor open")
	}
	s, err := Map(memfd(unix.F_SEAL_SHRINK), FillAhead)
	require.NoError(t, err, "sealed against shrinking is enough")
	assert.Len(t, s.Bytes(), 8192)
	require.NoError(t, s.Close())

	f, err := os.CreateTemp(t.TempDir(), "file")
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write(make([]byte, 4096))
	require.NoError(t, err)
	_, err = Map(int(f.Fd()), FillAhead)
	assert.ErrorContains(t, err, "seals", "a file on disk has none")
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	_, err = Map(p[0], FillAhead)
	assert.ErrorContains(t, err, "not a memory file")
	_, err = Map(-1, FillAhead)
	assert.Error(t, err)
}

func devShm(t *testing.T) []string {
	ents, err := os.ReadDir("/dev/shm")
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// mappingsOf returns the lines of /proc/PID/maps that name, or lie in
// /dev/shm.
func mappingsOf(pid int, name string) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, name) || strings.Contains(l, "/dev/shm/") {
			out = append(out, l)
		}
	}
	return out, nil
}

func init() {
	roles["map"] = func(conn *net.UnixConn, args []string) error {
		p, lines, err := childPair(conn)
		if err != nil {
			return err
		}
		ctl := p.mem[ctlBytes-64 : ctlBytes]
		if !bytes.Equal(ctl[:32], bytes.Repeat([]byte("P"), 32)) {
			return fmt.Errorf("the parent's bytes: %q", ctl[:32])
		}
		copy(ctl[32:], bytes.Repeat([]byte("C"), 32))
		maps, err := mappingsOf(os.Getpid(), "courier-test-map")
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(conn, "%s\n", strings.Join(maps, "|")); err != nil {
			return err
		}
		lines.Scan() // "close"
		return p.seg.Close()
	}
}

// TestSegmentBetweenProcesses passes a segment to another process, which
// maps it: both see each other's bytes, both mappings are memfds, and
// nothing appears in /dev/shm before, during or after.
func TestSegmentBetweenProcesses(t *testing.T) {
	before := devShm(t)
	size, _, _ := pairLayout(4096)
	seg, err := Create("courier-test-map", size, FillAhead)
	require.NoError(t, err)
	copy(seg.Bytes()[ctlBytes-64:], bytes.Repeat([]byte("P"), 32))
	_, toChild, toParent := pairLayout(4096)
	_, err = NewRing(seg.Bytes()[toChild:], 4096)
	require.NoError(t, err)
	_, err = NewRing(seg.Bytes()[toParent:], 4096)
	require.NoError(t, err)
	c := startChild(t, "map")
	require.NoError(t, SendFds(c.conn, []byte("4096\n"), seg.Fd()))
	require.Equal(t, "mapped", c.line(t))
	require.NoError(t, seg.CloseFd())

	theirs := strings.Split(c.line(t), "|")
	require.NotEmpty(t, theirs)
	for _, l := range theirs {
		assert.Contains(t, l, "/memfd:courier-test-map (deleted)", "the helper's mapping")
	}
	mine, err := mappingsOf(os.Getpid(), "courier-test-map")
	require.NoError(t, err)
	require.NotEmpty(t, mine)
	for _, l := range mine {
		assert.Contains(t, l, "/memfd:courier-test-map (deleted)")
	}
	assert.Equal(t, bytes.Repeat([]byte("C"), 32), seg.Bytes()[ctlBytes-32:ctlBytes])
	during := devShm(t)
	c.send(t, "close")
	c.wait(t)
	require.NoError(t, seg.Close())
	after := devShm(t)
	t.Logf("/dev/shm: %d entries before, %d during, %d after", len(before), len(during), len(after))
	for _, names := range [][]string{during, after} {
		for _, n := range names {
			assert.NotContains(t, n, "courier", "an entry in /dev/shm")
		}
		assert.Empty(t, newNames(before, names), "entries in /dev/shm that were not there before")
	}
}

func newNames(before, now []string) []string {
	var out []string
	for _, n := range now {
		if !slices.Contains(before, n) {
			out = append(out, n)
		}
	}
	return out
}
