//go:build linux

package shm

import (
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	roles["sleep"] = func(conn *net.UnixConn, args []string) error {
		time.Sleep(time.Hour)
		return nil
	}
}

// TestWatchPid kills a process and checks that its watcher notices within
// 2 s, without waiting for the process itself.
func TestWatchPid(t *testing.T) {
	c := startChild(t, "sleep")
	w, err := WatchPid(c.cmd.Process.Pid)
	require.NoError(t, err)
	defer w.Close()
	assert.False(t, w.Exited())
	time.Sleep(20 * time.Millisecond)
	assert.False(t, w.Exited())

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	for !w.Exited() {
		require.Less(t, time.Since(killed), 2*time.Second, "not noticed within 2 s")
		time.Sleep(time.Millisecond)
	}
	t.Logf("noticed %v after the kill (not reaped)", time.Since(killed))
	assert.True(t, w.Exited())
	c.waited = true
	c.cmd.Wait()
	assert.True(t, w.Exited(), "after the wait too")
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "again")
	assert.False(t, w.Exited(), "after Close")

	_, err = WatchPid(c.cmd.Process.Pid)
	assert.ErrorIs(t, err, syscall.ESRCH, "a process that is gone")
}

func TestWatchPidExitedChild(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$") // exits at once: no role
	require.NoError(t, cmd.Start())
	w, err := WatchPid(cmd.Process.Pid)
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, cmd.Wait())
	assert.True(t, w.Exited())
	assert.Zero(t, testing.AllocsPerRun(100, func() { w.Exited() }))
}
