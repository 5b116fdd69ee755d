package mp

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShareCores: ranks that fill the CPUs lower GOMAXPROCS to 1,
// the last release puts it back, and a GOMAXPROCS in the environment or
// ranks that fit the CPUs leave it alone.
func TestShareCores(t *testing.T) {
	prev := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(prev)
	noEnv := func(string) string { return "" }
	n := runtime.NumCPU()

	require.False(t, shareCores(n-1, noEnv), "fewer ranks than CPUs")
	require.False(t, shareCores(1, noEnv), "one rank")
	require.Equal(t, 2, runtime.GOMAXPROCS(0))
	require.False(t, shareCores(-1, noEnv), "a launcher that does not say")
	require.False(t, shareCores(n+1, func(k string) string {
		if k == "GOMAXPROCS" {
			return "2"
		}
		return ""
	}), "GOMAXPROCS set by the user")
	require.Equal(t, 2, runtime.GOMAXPROCS(0))

	require.True(t, shareCores(max(n, 2), noEnv), "as many ranks as CPUs")
	require.Equal(t, 1, runtime.GOMAXPROCS(0))
	require.True(t, shareCores(2*n, noEnv), "a second Init while lowered")
	releaseCores()
	require.Equal(t, 1, runtime.GOMAXPROCS(0), "one communicator that lowered it is still open")
	releaseCores()
	require.Equal(t, 2, runtime.GOMAXPROCS(0))
}

// TestSpareCores: ranks fewer than the CPUs leave some idle; as many or
// more, or a count the launcher does not give, do not.
func TestSpareCores(t *testing.T) {
	n := runtime.NumCPU()
	require.Equal(t, n > 1, spareCores(n-1))
	require.Equal(t, n > 1, spareCores(1))
	require.False(t, spareCores(n))
	require.False(t, spareCores(n+3))
	require.False(t, spareCores(-1), "a launcher that does not say")
	require.False(t, spareCores(0))
}

// TestWidenCores: a rank with one P on the CUDA IPC path gets a second,
// one with more keeps them, a lowered value stands against a widening,
// and the release puts 1 back.
func TestWidenCores(t *testing.T) {
	noEnv := func(string) string { return "" }
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)

	require.False(t, widenCores(func(k string) string {
		if k == "GOMAXPROCS" {
			return "1"
		}
		return ""
	}), "GOMAXPROCS set by the user")
	require.Equal(t, 1, runtime.GOMAXPROCS(0))

	require.True(t, widenCores(noEnv))
	require.Equal(t, 2, runtime.GOMAXPROCS(0))
	require.False(t, shareCores(max(runtime.NumCPU(), 2), noEnv), "a lowering while widened")
	require.Equal(t, 2, runtime.GOMAXPROCS(0))
	releaseCores()
	require.Equal(t, 1, runtime.GOMAXPROCS(0))

	runtime.GOMAXPROCS(4)
	require.False(t, widenCores(noEnv), "more than one P already")
	require.Equal(t, 4, runtime.GOMAXPROCS(0))
}

// tcpConn names a transport per rank, as the host backend does.
type tcpConn []string

func (c tcpConn) Transport(r int) string { return c[r] }

// TestAllTCP: only a rank whose every peer is over TCP shares its cores.
func TestAllTCP(t *testing.T) {
	require.True(t, allTCP(tcpConn{"self", "tcp", "tcp"}, 0, 3))
	require.False(t, allTCP(tcpConn{"self", "tcp", "shm"}, 0, 3))
	require.False(t, allTCP(tcpConn{"self"}, 0, 1), "one rank")
	require.False(t, allTCP(struct{}{}, 0, 2), "a backend that names no transport")
}

// TestAnyIPC: a rank with a peer on the CUDA IPC path is widened.
func TestAnyIPC(t *testing.T) {
	require.True(t, anyIPC(tcpConn{"nccl", "self", "cuda-ipc"}, 1, 3))
	require.False(t, anyIPC(tcpConn{"nccl", "self", "nccl"}, 1, 3))
	require.False(t, anyIPC(tcpConn{"cuda-ipc", "self"}, 0, 2), "its own rank is not a peer")
	require.False(t, anyIPC(struct{}{}, 0, 2), "a backend that names no transport")
}
