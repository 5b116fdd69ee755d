package tcp

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/courier-mp/courier/backend"
)

// requireNetns, set to 1, makes the partition test fail where it would
// skip because network namespaces cannot be made (CI sets it).
const requireNetns = "COURIER_REQUIRE_NETNS"

// TestPartitionEndsBothSides joins two ranks over a veth pair between two
// network namespaces, takes the link down, and has rank 0 start a large
// send to rank 1, which waits to receive it: the sender, with bytes in
// flight (the RTS) that are never acknowledged, and the receiver, whose
// connection is idle, both end their operations with ErrPeerLost within the bound
// (UserTimeout, here 2 s, or COURIER_TCP_USER_TIMEOUT when set) and the
// keep-alive's slack, instead of after
// TCP's retransmissions run out (some 15 minutes).
func TestPartitionEndsBothSides(t *testing.T) {
	t.Parallel() // waits more than it computes
	if testing.Short() {
		t.Skip("makes network namespaces")
	}
	a, b := vethPair(t)
	ln := inNetns(t, a.ns, func() (any, error) { return net.Listen("tcp", net.JoinHostPort(a.addr, "0")) }).(net.Listener)
	defer ln.Close()
	dialed := inNetns(t, b.ns, func() (any, error) { return net.Dial("tcp", ln.Addr().String()) }).(net.Conn)
	accepted, err := ln.Accept()
	require.NoError(t, err)

	bound := 2 * time.Second // short, so the test is; COURIER_TCP_USER_TIMEOUT measures another
	if os.Getenv(UserTimeoutEnv) != "" {
		ut, err := userTimeout(backend.Config{})
		require.NoError(t, err)
		require.Positive(t, ut, "the test needs a bound")
		bound = ut
	}
	ctx := context.Background()
	r0, err := New(ctx, Options{Rank: 0, Size: 2, Conns: []net.Conn{nil, accepted}, Linger: 100 * time.Millisecond, UserTimeout: bound})
	require.NoError(t, err)
	defer r0.Close()
	r1, err := New(ctx, Options{Rank: 1, Size: 2, Conns: []net.Conn{dialed, nil}, Linger: 100 * time.Millisecond, UserTimeout: bound})
	require.NoError(t, err)
	defer r1.Close()

	// The link works; then it is cut, and rank 0 starts a large send,
	// whose RTS is never acknowledged.
	_, err = waiter(t)(r0.Isend(bufOf([]byte{1}, backend.Uint8), 1, 0, 0))
	require.NoError(t, err)
	_, err = waiter(t)(r1.Irecv(bufOf(make([]byte, 1), backend.Uint8), 0, 0, 0))
	require.NoError(t, err)
	big := make([]byte, 4<<20)
	recv, err := r1.Irecv(bufOf(make([]byte, len(big)), backend.Uint8), 0, 1, 0)
	require.NoError(t, err)
	out, err := exec.Command("ip", "-n", b.ns, "link", "set", b.veth, "down").CombinedOutput()
	require.NoError(t, err, "%s", out)
	cut := time.Now()
	send, err := r0.Isend(bufOf(big, backend.Uint8), 1, 1, 0)
	require.NoError(t, err)

	limit := bound + 2*time.Second + time.Second + 3*time.Second // bound, keep-alive idle and interval, slack
	ends := make(chan string, 2)
	for name, rq := range map[string]backend.Request{"sender (rank 0)": send, "receiver (rank 1)": recv} {
		go func() {
			_, err := rq.Wait(limit + 5*time.Second)
			took := time.Since(cut)
			assert.ErrorIs(t, err, backend.ErrPeerLost, "%s", name)
			assert.Less(t, took, limit, "%s ended after %v: %v", name, took, err)
			ends <- fmt.Sprintf("%s ended %v after the cut: %v", name, took.Round(10*time.Millisecond), err)
		}()
	}
	for range 2 {
		t.Log(<-ends)
	}
	send.Release()
	recv.Release()
}

// end is one side of a veth pair: its namespace, interface and address.
type end struct{ ns, veth, addr string }

// vethPair makes two network namespaces joined by a veth pair, deleted
// when the test ends; it skips the test where that cannot be done (fails
// it with COURIER_REQUIRE_NETNS=1).
func vethPair(t *testing.T) (end, end) {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := "network namespaces cannot be made here: " + fmt.Sprintf(format, args...)
		if os.Getenv(requireNetns) == "1" {
			t.Fatalf("%s (and %s=1 requires them)", msg, requireNetns)
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		unavailable("not root (euid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		unavailable("no ip command (install iproute2): %v", err)
	}
	removeStaleNetns(t)
	pid := os.Getpid()
	subnet := fmt.Sprintf("10.201.%d", pid%256)
	var e [2]end
	for i, s := range []string{"a", "b"} {
		e[i] = end{ns: fmt.Sprintf("courier-part-%d-%s", pid, s), veth: fmt.Sprintf("crp%d%s", pid%1000000, s), addr: fmt.Sprintf("%s.%d", subnet, i+1)}
		if out, err := exec.Command("ip", "netns", "add", e[i].ns).CombinedOutput(); err != nil {
			unavailable("ip netns add %s: %v: %s", e[i].ns, err, out)
		}
		ns := e[i].ns
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
				t.Errorf("deleting namespace %s: %v: %s", ns, err, out)
			}
		})
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			unavailable("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("link", "add", e[0].veth, "netns", e[0].ns, "type", "veth", "peer", "name", e[1].veth, "netns", e[1].ns)
	for _, x := range e {
		run("-n", x.ns, "addr", "add", x.addr+"/24", "dev", x.veth)
		run("-n", x.ns, "link", "set", x.veth, "up")
		run("-n", x.ns, "link", "set", "lo", "up")
	}
	return e[0], e[1]
}

// staleNetns matches the namespaces vethPair names, with the ID of the
// process that made them.
var staleNetns = regexp.MustCompile(`^courier-part-(\d+)-[ab]$`)

// removeStaleNetns deletes namespaces left by runs of this test that were
// killed before their cleanup: those whose process is gone.
func removeStaleNetns(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := staleNetns.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		if _, err := os.Stat("/proc/" + m[1]); err == nil {
			continue
		}
		if out, err := exec.Command("ip", "netns", "delete", f[0]).CombinedOutput(); err != nil {
			t.Logf("deleting stale namespace %s: %v: %s", f[0], err, out)
		}
	}
}

// inNetns runs f on an OS thread that has entered namespace ns, so the
// sockets f makes belong to it, and returns what f returns. The thread is
// discarded afterwards (its goroutine ends locked to it).
func inNetns(t *testing.T, ns string, f func() (any, error)) any {
	t.Helper()
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		v, err := f()
		ch <- result{v, err}
	}()
	r := <-ch
	require.NoError(t, r.err)
	return r.v
}
