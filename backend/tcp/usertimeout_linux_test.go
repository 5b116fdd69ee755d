package tcp

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/courier-mp/courier/backend"
)

// userTimeoutOf reads TCP_USER_TIMEOUT of a connection, in milliseconds.
func userTimeoutOf(t *testing.T, nc net.Conn) int {
	t.Helper()
	return sockopt(t, nc, func(fd int) (int, error) {
		return unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	})
}

func TestUserTimeoutSet(t *testing.T) {
	for _, c := range []struct {
		ut   time.Duration
		want int
	}{{0, int(DefaultUserTimeout.Milliseconds())}, {1500 * time.Millisecond, 1500}, {-1, 0}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		a, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		b, err := ln.Accept()
		require.NoError(t, err)
		ln.Close()
		tuneConn(a, map[bool]time.Duration{true: DefaultUserTimeout, false: c.ut}[c.ut == 0])
		assert.Equal(t, c.want, userTimeoutOf(t, a), "UserTimeout %v", c.ut)
		a.Close()
		b.Close()
	}
}

func TestUserTimeoutEnv(t *testing.T) {
	for v, want := range map[string]time.Duration{"": DefaultUserTimeout, "30s": 30 * time.Second, "0": -1, "250ms": 250 * time.Millisecond} {
		got, err := userTimeout(backend.Config{Env: func(string) string { return v }})
		require.NoError(t, err, "%q", v)
		assert.Equal(t, want, got, "%q", v)
	}
	for _, v := range []string{"ten", "-5s"} {
		_, err := userTimeout(backend.Config{Env: func(string) string { return v }})
		assert.ErrorIs(t, err, backend.ErrInvalid, "%q", v)
		assert.ErrorContains(t, err, UserTimeoutEnv)
	}
}
