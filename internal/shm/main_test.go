//go:build linux

package shm

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/courier-mp/courier/internal/leakcheck"
)

// roleEnv, when set, makes the test binary a helper process running that
// role (see childMain) instead of the tests.
const roleEnv = "COURIER_SHM_TEST_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(childMain(role))
	}
	// Under -race a process sleeps 1 s before exiting; the helpers need not.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(leakcheck.Check(m.Run()))
}

// socketPair returns two connected unix sockets of type typ.
func socketPair(t testing.TB, typ int) (*net.UnixConn, *net.UnixConn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	a, b := fileConn(t, fds[0]), fileConn(t, fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// fileConn makes a *net.UnixConn of socket fd (and closes fd).
func fileConn(t testing.TB, fd int) *net.UnixConn {
	f := os.NewFile(uintptr(fd), "socket")
	defer f.Close()
	c, err := net.FileConn(f)
	require.NoError(t, err)
	return c.(*net.UnixConn)
}

// child is a helper process: a copy of the test binary running a role,
// its socket (fd 3 there) connected to conn here.
type child struct {
	cmd    *exec.Cmd
	conn   *net.UnixConn
	lines  *bufio.Scanner
	waited bool
}

// startChild starts the test binary as a helper in role, with args.
func startChild(t testing.TB, role string, args ...string) *child {
	return startChildCmd(t, nil, role, args...)
}

// startChildCmd is startChild with prefix (a command such as unshare)
// before the binary.
func startChildCmd(t testing.TB, prefix []string, role string, args ...string) *child {
	mine, theirs := socketPair(t, unix.SOCK_STREAM)
	f, err := theirs.File()
	require.NoError(t, err)
	defer f.Close()
	theirs.Close()
	argv := append(append(append([]string{}, prefix...), os.Args[0], "-test.run=^$"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, conn: mine, lines: bufio.NewScanner(mine)}
	t.Cleanup(func() {
		if !c.waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return c
}

// line reads the child's next line, waiting at most 60 s.
func (c *child) line(t testing.TB) string {
	t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	if !c.lines.Scan() {
		t.Fatalf("the helper ended without a line: %v", c.lines.Err())
	}
	return c.lines.Text()
}

// send writes a line to the child.
func (c *child) send(t testing.TB, format string, args ...any) {
	t.Helper()
	_, err := fmt.Fprintf(c.conn, format+"\n", args...)
	require.NoError(t, err)
}

// wait waits for the child to exit and requires that it succeeded.
func (c *child) wait(t testing.TB) {
	t.Helper()
	c.waited = true
	require.NoError(t, c.cmd.Wait())
}

// childMain runs a helper role; its socket is fd 3. It returns the exit
// status: 0, or 1 after printing what went wrong.
func childMain(role string) int {
	f := os.NewFile(3, "socket")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	args := flagArgs()
	fn, ok := roles[role]
	if !ok {
		fmt.Fprintln(os.Stderr, "helper: no role", role)
		return 1
	}
	if err := fn(conn, args); err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", role, err)
		return 1
	}
	return 0
}

// flagArgs returns the helper's arguments after the test flags.
func flagArgs() []string {
	var out []string
	for _, a := range os.Args[1:] {
		if !strings.HasPrefix(a, "-test.") {
			out = append(out, a)
		}
	}
	return out
}

// roles are the helper processes' parts, by name; proc_test.go and
// bench_test.go fill it.
var roles = map[string]func(conn *net.UnixConn, args []string) error{}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}
