package tcp

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// sockopt reads one socket option of nc with get.
func sockopt[T any](t *testing.T, nc net.Conn, get func(fd int) (T, error)) T {
	t.Helper()
	rc, err := nc.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var v T
	var gerr error
	require.NoError(t, rc.Control(func(fd uintptr) { v, gerr = get(int(fd)) }))
	require.NoError(t, gerr)
	return v
}

// congestion returns tc's congestion control.
func congestion(t *testing.T, tc *net.TCPConn) string {
	t.Helper()
	return sockopt(t, tc, func(fd int) (string, error) {
		return unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
}

// loopbackPair returns both ends of a loopback TCP connection.
func loopbackPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	b, a := dialPair(t)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// TestUnpaceLoopback: a loopback connection under BBR moves to a
// congestion control that does not pace; one under CUBIC is left alone.
func TestUnpaceLoopback(t *testing.T) {
	a, b := loopbackPair(t)
	rc, err := a.SyscallConn()
	require.NoError(t, err)
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, "bbr")
	}))
	if serr != nil {
		t.Skipf("this kernel does not let the test choose BBR (%v): nothing to take a connection off", serr)
	}
	require.Equal(t, "bbr", congestion(t, a))
	assert.True(t, unpace(a), "a loopback connection under BBR")
	assert.Contains(t, []string{"cubic", "reno"}, congestion(t, a))

	before := congestion(t, b)
	if paces(before) {
		assert.True(t, unpace(b))
	} else {
		assert.False(t, unpace(b), "a connection under %s is left as it is", before)
		assert.Equal(t, before, congestion(t, b))
	}
}

// TestUnpaceRules: which names pace, and which address pairs stay on
// this host.
func TestUnpaceRules(t *testing.T) {
	assert.True(t, paces("bbr"))
	assert.True(t, paces("bbr\x00\x00\x00"))
	assert.False(t, paces("cubic"))
	assert.False(t, paces(""))
	ip := func(s string) *net.TCPAddr { return &net.TCPAddr{IP: net.ParseIP(s), Port: 1} }
	assert.True(t, onThisHost(ip("127.0.0.1"), ip("127.0.0.1")))
	assert.True(t, onThisHost(ip("127.0.0.1"), ip("127.0.0.2")))
	assert.True(t, onThisHost(ip("::1"), ip("::1")))
	assert.True(t, onThisHost(ip("10.0.0.5"), ip("10.0.0.5")))
	assert.False(t, onThisHost(ip("10.0.0.5"), ip("10.0.0.6")))
	assert.False(t, onThisHost(ip("127.0.0.1"), ip("10.0.0.6")))
	assert.False(t, onThisHost(&net.UnixAddr{Name: "a"}, ip("127.0.0.1")))
}
