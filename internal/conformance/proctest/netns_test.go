package proctest_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/courier-mp/courier/internal/conformance/proctest"
	"github.com/courier-mp/courier/internal/testscope"
)

// requireNetnsEnv, set to 1, makes TestConformanceNetns fail where it
// would skip because namespaces cannot be made: CI sets it, so the test
// can never pass by skipping there.
const requireNetnsEnv = "COURIER_REQUIRE_NETNS"

// TestConformanceNetns runs the conformance suite on two "hosts": two
// network namespaces joined by a veth pair, 10.200.X.1/24 in the first and
// 10.200.X.2/24 in the second, with ranks 0 and 1 in the first and ranks 2
// and 3 in the second. Every rank listens on its namespace's veth address
// (COURIER_IFACE) and meets rank 0 at COURIER_ADDR=10.200.X.1:port, so
// traffic between ranks 0 and 1 stays inside the first namespace and
// traffic between 0 and 2 crosses the veth. No other address is used.
//
// It needs root and iproute2's ip; where namespaces cannot be made it
// skips, saying why, or fails when COURIER_REQUIRE_NETNS=1. The namespaces
// are deleted at the end, pass or fail.
func TestConformanceNetns(t *testing.T) {
	if proctest.InJob() {
		t.Skip("this process is a rank of a job: only " + rankTest + " runs")
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	if !testscope.Full() && os.Getenv(requireNetnsEnv) != "1" {
		t.Skipf("the short form; %s=1 (or %s=1) runs it", testscope.Env, requireNetnsEnv)
	}
	hosts := makeHosts(t)
	// The ranks run TestConformanceProcesses, which in the short form
	// leaves the heavy cases out (CI's race step): the launcher expects
	// what they run.
	opts := proctest.Options{Cases: *casesFlag, Light: !testscope.Full()}
	port := 20000 + rand.IntN(40000) // the namespace is new: nothing listens there
	env := proctest.JobEnv(4, net.JoinHostPort(hosts[0].addr, strconv.Itoa(port)), proctest.NewKey())
	var procs []proctest.Proc
	for rank := range 4 {
		h := hosts[rank/2]
		procs = append(procs, proctest.Proc{
			Rank:   rank,
			Prefix: []string{"ip", "netns", "exec", h.ns},
			Env:    append(env(rank), "COURIER_IFACE="+h.veth, "COURIER_RENDEZVOUS_FD="),
		})
	}
	before := hosts[0].vethBytes(t)
	proctest.Launch(t, rankTest, procs, opts)
	crossed := hosts[0].vethBytes(t) - before
	t.Logf("%d bytes crossed the veth between %s and %s", crossed, hosts[0].ns, hosts[1].ns)
	// Every case's rendezvous crosses it (ranks 2 and 3 meet rank 0), and
	// with every case selected, the heavy ones too, tens of MiB of
	// payload do (31 MiB when this was written), while the 64 MiB of
	// Large/64MiB between ranks 0 and 1 stay in the first namespace.
	want := int64(1000)
	if opts.Cases == "" && os.Getenv(proctest.CasesEnv) == "" && !opts.Light {
		want = 8 << 20
	}
	if crossed < want && !t.Failed() {
		t.Errorf("only %d bytes crossed the veth, want at least %d: did the ranks talk over another path?", crossed, want)
	}
}

// host is one end of the veth pair: a namespace, its interface and address.
type host struct {
	ns, veth, addr string
}

// makeHosts makes two namespaces joined by a veth pair, named after this
// process's ID so that parallel runs do not collide, and deletes them when
// the test ends. Where namespaces cannot be made, it skips the test (fails
// it with COURIER_REQUIRE_NETNS=1).
func makeHosts(t *testing.T) [2]host {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := "network namespaces cannot be made here: " + fmt.Sprintf(format, args...)
		if os.Getenv(requireNetnsEnv) == "1" {
			t.Fatalf("%s (and %s=1 requires them)", msg, requireNetnsEnv)
		}
		t.Skip(msg)
	}
	switch {
	case runtime.GOOS != "linux":
		unavailable("they are a Linux feature, this is %s", runtime.GOOS)
	case os.Geteuid() != 0:
		unavailable("not root (euid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		unavailable("no ip command (install iproute2): %v", err)
	}
	removeStale(t)
	pid := os.Getpid()
	subnet := fmt.Sprintf("10.200.%d", pid%256)
	var hs [2]host
	for i, end := range []string{"a", "b"} {
		hs[i] = host{
			ns:   fmt.Sprintf("courier-test-%d-%s", pid, end),
			veth: fmt.Sprintf("crv%d%s", pid, end), // at most 15 bytes
			addr: fmt.Sprintf("%s.%d", subnet, i+1),
		}
		if out, err := ip("netns", "add", hs[i].ns); err != nil {
			unavailable("ip netns add %s: %v: %s", hs[i].ns, err, out)
		}
		ns := hs[i].ns
		t.Cleanup(func() {
			if out, err := ip("netns", "delete", ns); err != nil {
				t.Errorf("deleting namespace %s: %v: %s", ns, err, out)
			}
		})
		if out, err := ip("netns", "exec", ns, "true"); err != nil {
			unavailable("ip netns exec %s: %v: %s", ns, err, out)
		}
	}
	// Made inside the namespaces: deleting them deletes the pair.
	if out, err := ip("link", "add", hs[0].veth, "netns", hs[0].ns, "type", "veth",
		"peer", "name", hs[1].veth, "netns", hs[1].ns); err != nil {
		unavailable("making a veth pair: %v: %s", err, out)
	}
	for _, h := range hs {
		for _, args := range [][]string{
			{"-n", h.ns, "addr", "add", h.addr + "/24", "dev", h.veth},
			{"-n", h.ns, "link", "set", h.veth, "up"},
			{"-n", h.ns, "link", "set", "lo", "up"},
		} {
			if out, err := ip(args...); err != nil {
				t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
	}
	return hs
}

// staleName matches the namespaces makeHosts names, with the ID of the
// process that made them.
var staleName = regexp.MustCompile(`^courier-test-(\d+)-[ab]$`)

// removeStale deletes namespaces left by earlier runs of this test that
// were killed before their cleanup: those whose process no longer exists.
func removeStale(t *testing.T) {
	out, err := ip("netns", "list")
	if err != nil {
		return
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := staleName.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		if _, err := os.Stat("/proc/" + m[1]); err == nil {
			continue // its test is still running, or the ID was reused
		}
		if out, err := ip("netns", "delete", f[0]); err != nil {
			t.Logf("deleting stale namespace %s: %v: %s", f[0], err, out)
		}
	}
}

// vethBytes is the number of bytes the host's veth end has sent and
// received.
func (h host) vethBytes(t *testing.T) int64 {
	t.Helper()
	out, err := ip("-n", h.ns, "-s", "-j", "link", "show", "dev", h.veth)
	if err != nil {
		t.Fatalf("reading %s's counters: %v: %s", h.veth, err, out)
	}
	var links []struct {
		Stats struct {
			RX, TX struct {
				Bytes int64 `json:"bytes"`
			}
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		t.Fatalf("reading %s's counters from %q: %v", h.veth, out, err)
	}
	return links[0].Stats.RX.Bytes + links[0].Stats.TX.Bytes
}

// ip runs iproute2's ip and returns its combined output.
func ip(args ...string) (string, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
