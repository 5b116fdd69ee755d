//go:build linux

package shm

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	roles["hostid"] = func(conn *net.UnixConn, args []string) error {
		id, err := HostID()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(conn, id)
		return err
	}
}

func TestHostID(t *testing.T) {
	id, err := HostID()
	require.NoError(t, err)
	t.Log(id)
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(id, strings.TrimSpace(string(boot))))
	for _, ns := range []string{"net:[", "pid:[", "ipc:[", "user:["} {
		assert.Contains(t, id, ns)
	}
	again, err := HostID()
	require.NoError(t, err)
	assert.Equal(t, id, again)

	c := startChild(t, "hostid")
	assert.Equal(t, id, c.line(t), "another process on this host")
	c.wait(t)

	// A process in another network namespace is another host to a
	// transport: its abstract sockets are not this one's.
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) to start a process in a network namespace")
	}
	if out, err := exec.Command(unshare, "--net", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a network namespace here: %v: %s", err, out)
	}
	c = startChildCmd(t, []string{unshare, "--net"}, "hostid")
	other := c.line(t)
	c.wait(t)
	assert.NotEqual(t, id, other, "a process in another network namespace")
	assert.Equal(t, strings.Fields(id)[0], strings.Fields(other)[0], "the same boot")
}
