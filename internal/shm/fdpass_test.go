//go:build linux

package shm

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openFds counts this process's open descriptors.
func openFds(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

func pipe(t *testing.T) (r, w int) {
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0], p[1]
}

func TestFdPassing(t *testing.T) {
	for name, typ := range map[string]int{"stream": unix.SOCK_STREAM, "seqpacket": unix.SOCK_SEQPACKET} {
		t.Run(name, func(t *testing.T) {
			a, b := socketPair(t, typ)
			r1, w1 := pipe(t)
			r2, w2 := pipe(t)
			require.NoError(t, SendFds(a, []byte("two pipes"), w1, w2))

			var msg [64]byte
			n, fds, err := RecvFds(b, msg[:], 4)
			require.NoError(t, err)
			assert.Equal(t, "two pipes", string(msg[:n]))
			require.Len(t, fds, 2)
			for i, fd := range fds {
				flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
				require.NoError(t, err)
				assert.NotZero(t, flags&unix.FD_CLOEXEC, "received descriptors are close-on-exec")
				// The received descriptor writes into the sender's pipe.
				_, err = unix.Write(fd, []byte{byte('a' + i)})
				require.NoError(t, err)
				require.NoError(t, unix.Close(fd))
			}
			var got [1]byte
			_, err = unix.Read(r1, got[:])
			require.NoError(t, err)
			assert.Equal(t, "a", string(got[:]))
			_, err = unix.Read(r2, got[:])
			require.NoError(t, err)
			assert.Equal(t, "b", string(got[:]))

			// A message without descriptors is just bytes.
			require.NoError(t, SendFds(a, []byte("none")))
			n, fds, err = RecvFds(b, msg[:], 4)
			require.NoError(t, err)
			assert.Equal(t, "none", string(msg[:n]))
			assert.Empty(t, fds)
		})
	}
}

func TestFdPassingTooMany(t *testing.T) {
	a, b := socketPair(t, unix.SOCK_STREAM)
	_, w := pipe(t)
	base := openFds(t)
	for _, tc := range []struct{ sent, max int }{{3, 1}, {2, 1}, {1, 0}, {5, 3}} {
		fds := make([]int, tc.sent)
		for i := range fds {
			fds[i] = w
		}
		require.NoError(t, SendFds(a, []byte("x"), fds...))
		var msg [8]byte
		n, got, err := RecvFds(b, msg[:], tc.max)
		assert.ErrorContains(t, err, "more than", "%d sent, %d asked for", tc.sent, tc.max)
		assert.Equal(t, 1, n)
		assert.Nil(t, got)
		assert.Equal(t, base, openFds(t), "%d sent, %d asked for: every one closed", tc.sent, tc.max)
	}
	assert.ErrorContains(t, SendFds(a, nil, w), "empty message")
	assert.Error(t, SendFds(a, []byte("x"), make([]int, MaxFds+1)...))
	_, _, err := RecvFds(b, make([]byte, 8), MaxFds+1)
	assert.Error(t, err)
}

func TestFdPassingDeadlineAndEOF(t *testing.T) {
	a, b := socketPair(t, unix.SOCK_STREAM)
	require.NoError(t, b.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	start := time.Now()
	_, _, err := RecvFds(b, make([]byte, 8), 1)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond)

	// A receive blocked in the poller is woken by a message.
	require.NoError(t, b.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, w := pipe(t)
	go func() {
		time.Sleep(20 * time.Millisecond)
		SendFds(a, []byte("late"), w)
	}()
	var msg [8]byte
	n, fds, err := RecvFds(b, msg[:], 1)
	require.NoError(t, err)
	assert.Equal(t, "late", string(msg[:n]))
	require.Len(t, fds, 1)
	unix.Close(fds[0])

	require.NoError(t, a.SetWriteDeadline(time.Now().Add(-time.Second)))
	assert.ErrorIs(t, SendFds(a, []byte("x"), w), os.ErrDeadlineExceeded)
	require.NoError(t, a.Close())
	_, _, err = RecvFds(b, msg[:], 1)
	assert.True(t, errors.Is(err, io.EOF), "%v", err)
}
