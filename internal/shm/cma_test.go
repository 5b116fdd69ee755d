//go:build linux

package shm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func randomBytes(seed uint64, n int) []byte {
	var key [32]byte
	key[0] = byte(seed)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// TestTransferSelf copies within this process, where the kernel always
// allows it: sizes around the iovec split included.
func TestTransferSelf(t *testing.T) {
	pid := os.Getpid()
	require.NoError(t, CanReadFrom(pid, ProbeAddr()))
	src := randomBytes(1, cmaIov+12345)
	for _, n := range []int{0, 1, 4096, 100_000, cmaIov, cmaIov + 12345} {
		dst := make([]byte, n)
		got, err := ReadFrom(pid, dst, addr(src))
		require.NoError(t, err)
		assert.Equal(t, n, got)
		assert.True(t, bytes.Equal(src[:n], dst), "%d bytes read", n)
		clear(dst)
		got, err = WriteTo(pid, addr(dst), src[:n])
		require.NoError(t, err)
		assert.Equal(t, n, got)
		assert.True(t, bytes.Equal(src[:n], dst), "%d bytes written", n)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { ReadFrom(pid, src[:4096], addr(src[4096:])) }))

	// Memory the process does not have is EFAULT; a wrong probe address,
	// a mismatch.
	_, err := ReadFrom(pid, make([]byte, 8), 8)
	assert.ErrorIs(t, err, syscall.EFAULT)
	assert.ErrorContains(t, CanReadFrom(pid, addr(src)), "not the probe's pattern")
}

func init() {
	roles["cma"] = func(conn *net.UnixConn, args []string) error {
		out := randomBytes(2, 1<<20)
		in := make([]byte, 1<<20)
		if _, err := fmt.Fprintf(conn, "%d %#x %#x %#x\n", os.Getpid(), ProbeAddr(), addr(out), addr(in)); err != nil {
			return err
		}
		var line [16]byte
		if _, err := conn.Read(line[:]); err != nil { // "check"
			return err
		}
		ok := bytes.Equal(in, randomBytes(3, 1<<20))
		_, err := fmt.Fprintln(conn, ok)
		runtime.KeepAlive(out)
		return err
	}
}

// TestTransferProcesses reads another process's buffer and writes into
// another, each with one copy, after the setup probe.
func TestTransferProcesses(t *testing.T) {
	c := startChild(t, "cma")
	var pid int
	var probe, out, in uintptr
	_, err := fmt.Sscanf(c.line(t), "%d %v %v %v", &pid, &probe, &out, &in)
	require.NoError(t, err)
	require.Equal(t, c.cmd.Process.Pid, pid)
	require.NoError(t, CanReadFrom(pid, probe))

	got := make([]byte, 1<<20)
	n, err := ReadFrom(pid, got, out)
	require.NoError(t, err)
	assert.Equal(t, len(got), n)
	assert.True(t, bytes.Equal(randomBytes(2, 1<<20), got))
	n, err = WriteTo(pid, in, randomBytes(3, 1<<20))
	require.NoError(t, err)
	assert.Equal(t, 1<<20, n)
	_, err = ReadFrom(pid, got[:8], 8)
	assert.ErrorIs(t, err, syscall.EFAULT)
	c.send(t, "check")
	assert.Equal(t, "true", c.line(t), "the helper saw the bytes written")
	c.wait(t)

	_, err = ReadFrom(pid, got[:8], out)
	assert.ErrorIs(t, err, syscall.ESRCH)
	assert.ErrorContains(t, err, "is gone")
	assert.ErrorIs(t, CanReadFrom(pid, probe), syscall.ESRCH)
}

func init() {
	roles["refused"] = func(conn *net.UnixConn, args []string) error {
		var probe uintptr
		if _, err := fmt.Sscan(args[1], &probe); err != nil {
			return err
		}
		err := CanReadFrom(atoi(args[0]), probe)
		_, werr := fmt.Fprintf(conn, "%v %v %v\n", errors.Is(err, ErrNotSupported), errors.Is(err, syscall.EPERM), err)
		return werr
	}
}

// TestTransferRefused checks the error when the kernel refuses: a helper
// running as another user (nobody) probes this process. It needs root, to
// start the helper as nobody.
func TestTransferRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		err := CanReadFrom(1, ProbeAddr()) // init is root's
		require.ErrorIs(t, err, ErrNotSupported)
		require.ErrorIs(t, err, syscall.EPERM)
		t.Log(err)
		return
	}
	// The test binary must be where nobody can run it.
	dir, err := os.MkdirTemp("", "shm-refused")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	require.NoError(t, os.Chmod(dir, 0o755))
	exe := filepath.Join(dir, "shm.test")
	bin, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(exe, bin, 0o755))

	mine, theirs := socketPair(t, syscall.SOCK_STREAM)
	f, err := theirs.File()
	require.NoError(t, err)
	defer f.Close()
	cmd := exec.Command(exe, "-test.run=^$", fmt.Sprint(os.Getpid()), fmt.Sprintf("%#x", ProbeAddr()))
	cmd.Env = append(os.Environ(), roleEnv+"=refused")
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	c := &child{cmd: cmd, conn: mine, lines: bufio.NewScanner(mine), waited: true}
	line := c.line(t)
	t.Log(line)
	assert.True(t, strings.HasPrefix(line, "true true "), "matches ErrNotSupported and EPERM")
	assert.Contains(t, line, "process_vm_readv refused (")
}
