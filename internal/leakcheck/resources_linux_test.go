//go:build linux

package leakcheck

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// has reports whether some line of the leak list contains s.
func has(list []string, s string) bool {
	for _, l := range list {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// TestFindResources makes sure the check sees a pipe, a segment in
// /dev/shm (its descriptor, its mapping and its name), and an address
// file that the tests added, and no longer once they are gone.
func TestFindResources(t *testing.T) {
	if l := leaks(before, take()); len(l) != 0 {
		t.Fatalf("before the test, the check sees %q", l)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	name := "courier-leakcheck-test-" + strconv.Itoa(os.Getpid())
	seg, err := os.OpenFile("/dev/shm/"+name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Skip("no /dev/shm:", err)
	}
	defer os.Remove(seg.Name())
	if err := seg.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(seg.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	dir := addrDirName()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	addr := filepath.Join(dir, "openmpi-leakcheck.addr")
	if err := os.WriteFile(addr, []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	l := leaks(before, take())
	wants := []string{"pipe:[", ": /dev/shm/" + name, "mapping(s) of /dev/shm/" + name}
	if tmpDir != "" { // the process that made the test directory checks it
		wants = append(wants, "address file "+addr)
	}
	for _, want := range wants {
		if !has(l, want) {
			t.Errorf("the check does not see %q in %q", want, l)
		}
	}
	if l := leaks(before, take()); !slices.Contains(l, "/dev/shm/"+name) {
		t.Errorf("the check does not see the name /dev/shm/%s in %q", name, l)
	}
	seg.Close()
	r.Close()
	w.Close()
	if l := leaks(before, take()); !has(l, "mapping(s) of /dev/shm/") || has(l, "pipe:[") {
		t.Errorf("with the mapping, the name and the file left, the check sees %q", l)
	}
	syscall.Munmap(mem)
	os.Remove(seg.Name())
	os.Remove(addr)
	if l := findResources(0); len(l) != 0 {
		t.Errorf("the check still sees %q once all is closed", l)
	}
}

// TestPrivateTmpDir: the test binary's TMPDIR is a directory of its own,
// inherited by the processes it starts.
func TestPrivateTmpDir(t *testing.T) {
	if launched() {
		t.Skip("a launcher's rank keeps the TMPDIR its job shares")
	}
	if tmpDir == "" || os.TempDir() != tmpDir || !strings.HasPrefix(filepath.Base(tmpDir), "courier-test-") {
		t.Fatalf("TMPDIR is %q, the directory made for the tests %q", os.TempDir(), tmpDir)
	}
	if os.Getenv(ownerEnv) == "" {
		t.Fatalf("%s is not set for the processes the tests start", ownerEnv)
	}
}

// TestSocketsNamed: a socket left open is reported with its addresses,
// so a report says which connection it is.
func TestSocketsNamed(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	u, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	got := strings.Join(leaks(before, take()), "\n")
	for _, want := range []string{
		"(tcp 127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port) + " -> 0.0.0.0:0)",
		"(tcp " + c.LocalAddr().String() + " -> " + l.Addr().String() + ")",
		"(unix " + u.Addr().String() + ")",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report does not say %q:\n%s", want, got)
		}
	}
}
