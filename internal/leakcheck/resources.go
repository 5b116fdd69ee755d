package leakcheck

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/courier-mp/courier/cuda"
)

// Besides goroutines, Check compares what the process holds at the end
// of the tests with what it held when the test binary started (this
// package's init, before TestMain):
//
//   - open file descriptors (/proc/self/fd: sockets, pipes, pidfds,
//     memfds, files), leaving out the test framework's own (the files its
//     -test.* flags name, and the runtime's poller: its epoll and eventfd
//     descriptors, which live as long as the process);
//   - shared-memory mappings (/proc/self/maps entries of a memfd or of
//     /dev/shm), which outlive their descriptors;
//   - entries of /dev/shm whose name starts with "courier" (courier names
//     nothing there; a segment someone adds by name must not be left);
//   - the address-file directory (bootstrap's <TMPDIR>/courier-<uid>).
//
// So that the last is this process's alone, and processes the tests
// start (ranks of a job, helpers) write there too, init points TMPDIR at
// a fresh directory for the test binary and its children, which Check
// removes. A copy of the test binary that the tests started, directly or
// through a launcher, keeps the TMPDIR it was given: it finds itself
// among the ancestors of its process, or inherits ownerEnv (tests that
// pass on only some variables may drop that one). So does a test binary
// that a launcher started as a rank of a job (mpirun ./pkg.test, on the
// GPU machine): its ranks meet through the address file of the TMPDIR
// they share. Only the process that made the directory checks the
// address files. Where /proc is missing (not Linux) the descriptors,
// mappings and address files are not checked.

// ownerEnv names the process that made the test directory (its pid).
const ownerEnv = "COURIER_LEAKCHECK_TMPDIR_OWNER"

var (
	// tmpDir is the directory init made for TMPDIR ("" where it kept the
	// inherited one).
	tmpDir string
	// before is what the process held at init.
	before snapshot
)

func init() {
	if os.Getenv(ownerEnv) == "" && !launched() && !startedByItself() {
		if d, err := os.MkdirTemp("", "courier-test-"); err == nil {
			// Others may pass through it (a test runs a helper as nobody
			// from a folder of its own there), not list it.
			os.Chmod(d, 0o711)
			tmpDir = d
			os.Setenv("TMPDIR", d)
			os.Setenv(ownerEnv, strconv.Itoa(os.Getpid()))
		}
	}
	before = take()
}

// rankVars are the variables by which a launcher tells a process its
// rank (bootstrap's, and a few more).
var rankVars = []string{"COURIER_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID",
	"FLUX_TASK_RANK", "JSM_NAMESPACE_RANK", "PALS_RANKID", "RANK"}

// launched reports whether a launcher started this process as a rank.
func launched() bool {
	for _, v := range rankVars {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// startedByItself reports whether an ancestor of this process runs the
// same executable (the test binary started this copy, perhaps through a
// launcher), or whether that cannot be told (no /proc).
func startedByItself() bool {
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return true
	}
	pid := os.Getppid()
	for range 64 {
		if pid <= 1 {
			return false
		}
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && exe == self {
			return true
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil {
			return false
		}
	}
	return false
}

// WarmCUDA starts the CUDA driver where one is present and has it make a
// context, a stream and an event on every device, then Rebases: the
// pipes and the socket the driver opens then, and keeps until the
// process ends, are not the tests' leaks. Where CUDA is absent it does
// nothing. Call it from the TestMain of a package whose tests use a GPU,
// before m.Run.
func WarmCUDA() {
	n, err := cuda.DeviceCount()
	if err != nil {
		return
	}
	for d := range n {
		dev := cuda.Device(d)
		if buf, err := cuda.Alloc[uint8](dev, 1); err == nil {
			buf.Free()
		}
		if s, err := cuda.NewStream(dev); err == nil {
			if e, err := cuda.NewEvent(dev); err == nil {
				e.Record(s)
				e.Destroy()
			}
			s.Synchronize()
			s.Destroy()
		}
	}
	Rebase()
}

// Rebase takes what the process holds now as what it started with: for a
// test binary that, before its tests, loads a library that keeps
// descriptors until the process ends (the CUDA driver opens pipes, a
// socket and its device nodes when it starts and when it makes a
// context). Call it from TestMain, before m.Run.
func Rebase() { before = take() }

// driverFile reports whether target is a device node of the NVIDIA
// driver, which the CUDA driver opens as it maps memory and keeps open:
// device memory itself is checked by cuda.Live, not here.
func driverFile(target string) bool { return strings.HasPrefix(target, "/dev/nvidia") }

// snapshot is what the process holds of the kinds Check compares.
type snapshot struct {
	fds     map[int]string // descriptor → what it is (its link in /proc/self/fd)
	maps    map[string]int // shared-memory mapping → how many
	devShm  map[string]bool
	addrDir map[string]bool
}

// addrDirName is bootstrap's address-file directory under TMPDIR
// (bootstrap.defaultRunDir: the name is kept alike there).
func addrDirName() string {
	return filepath.Join(os.TempDir(), "courier-"+strconv.Itoa(os.Getuid()))
}

func take() snapshot {
	s := snapshot{fds: fds(), maps: shmMaps(), devShm: entries("/dev/shm", "courier")}
	if tmpDir != "" {
		s.addrDir = entries(addrDirName(), "")
	}
	return s
}

// fds lists the process's open descriptors, nil where /proc has none.
func fds() map[int]string {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil
	}
	self := int(d.Fd())
	out := make(map[int]string, len(names))
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd == self {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + n)
		if err != nil {
			continue // closed meanwhile
		}
		out[fd] = target
	}
	return out
}

// shmMaps counts the process's mappings of memfds and of /dev/shm files,
// by what /proc/self/maps calls them; nil where it cannot be read.
func shmMaps() map[string]int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		name := strings.Join(f[5:], " ")
		if strings.HasPrefix(name, "/memfd:") || strings.HasPrefix(name, "/dev/shm/") {
			out[name]++
		}
	}
	return out
}

// DevShm lists the entries of /dev/shm whose names are courier's (they
// start with "courier"), for LeftByJob.
func DevShm() map[string]bool { return entries("/dev/shm", "courier") }

// LeftByJob describes, one line each, what a job whose processes ran with
// TMPDIR tmp left behind once it has ended: the files of its address-file
// directory, and the entries of /dev/shm of courier's that DevShm did not
// list before the job (before). Empty when it left nothing.
func LeftByJob(tmp string, before map[string]bool) []string {
	var out []string
	for _, name := range sorted(entries(filepath.Join(tmp, "courier-"+strconv.Itoa(os.Getuid())), "")) {
		out = append(out, "the job left "+name+" in the address-file directory")
	}
	for _, name := range sorted(DevShm()) {
		if !before[name] {
			out = append(out, "the job left /dev/shm/"+name)
		}
	}
	return out
}

// entries lists the names in dir that start with prefix (none when dir
// does not exist).
func entries(dir, prefix string) map[string]bool {
	names, _ := os.ReadDir(dir)
	out := map[string]bool{}
	for _, e := range names {
		if strings.HasPrefix(e.Name(), prefix) {
			out[e.Name()] = true
		}
	}
	return out
}

// frameworkFile reports whether target is a file one of the testing
// package's flags names (its log, a profile, a coverage file), or the
// runtime poller's descriptors.
func frameworkFile(target string) bool {
	switch target {
	case "anon_inode:[eventpoll]", "anon_inode:[eventfd]":
		return true
	}
	found := false
	flag.VisitAll(func(f *flag.Flag) {
		if v := f.Value.String(); strings.HasPrefix(f.Name, "test.") && v != "" && v != "true" && v != "false" {
			if abs, err := filepath.Abs(v); err == nil && (target == abs || strings.HasPrefix(target, abs+string(filepath.Separator))) {
				found = true
			}
		}
	})
	return found
}

// leaks compares now with before and describes what was added, one line
// each ("" when nothing was).
func leaks(before, now snapshot) []string {
	var out []string
	if before.fds != nil {
		var fds []int
		for fd, target := range now.fds {
			if was, ok := before.fds[fd]; (!ok || was != target) && !frameworkFile(target) && !driverFile(target) {
				fds = append(fds, fd)
			}
		}
		slices.Sort(fds)
		var socks map[string]string
		for _, fd := range fds {
			t := now.fds[fd]
			if strings.HasPrefix(t, "socket:[") {
				if socks == nil {
					socks = sockets()
				}
				if d := socks[strings.TrimSuffix(strings.TrimPrefix(t, "socket:["), "]")]; d != "" {
					t += " (" + d + ")"
				}
			}
			out = append(out, fmt.Sprintf("file descriptor %d: %s", fd, t))
		}
	}
	for _, name := range sorted(now.maps) {
		if n := now.maps[name] - before.maps[name]; n > 0 {
			out = append(out, fmt.Sprintf("%d mapping(s) of %s", n, name))
		}
	}
	for _, name := range sorted(now.devShm) {
		if !before.devShm[name] {
			out = append(out, "/dev/shm/"+name)
		}
	}
	for _, name := range sorted(now.addrDir) {
		if !before.addrDir[name] {
			out = append(out, "address file "+filepath.Join(addrDirName(), name))
		}
	}
	return out
}

// sockets describes the process's sockets by inode, from /proc/self/net:
// "tcp 127.0.0.1:5000 -> 127.0.0.1:41234" or "unix /path" ("unix" alone
// for an unnamed one), so a leak report says what a socket is.
func sockets() map[string]string {
	out := map[string]string{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile("/proc/self/net/" + f)
		for i, line := range strings.Split(string(b), "\n") {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			x := strings.Fields(line)
			if i == 0 || len(x) < 10 {
				continue
			}
			out[x[9]] = fmt.Sprintf("%s %s -> %s", f, hexAddr(x[1]), hexAddr(x[2]))
		}
	}
	b, _ := os.ReadFile("/proc/self/net/unix")
	for i, line := range strings.Split(string(b), "\n") {
		// Num RefCount Protocol Flags Type St Inode [Path]
		x := strings.Fields(line)
		if i == 0 || len(x) < 7 {
			continue
		}
		d := "unix"
		if len(x) > 7 {
			d += " " + x[7]
		}
		out[x[6]] = d
	}
	return out
}

// hexAddr turns /proc/net/tcp's address form (IPv4 in host byte order,
// then the port, in hexadecimal) into a readable one; an IPv6 address
// keeps its hexadecimal form.
func hexAddr(a string) string {
	host, port, ok := strings.Cut(a, ":")
	p, err := strconv.ParseUint(port, 16, 16)
	if !ok || err != nil {
		return a
	}
	if v, err := strconv.ParseUint(host, 16, 32); err == nil && len(host) == 8 {
		return fmt.Sprintf("%d.%d.%d.%d:%d", byte(v), byte(v>>8), byte(v>>16), byte(v>>24), p)
	}
	return fmt.Sprintf("[%s]:%d", host, p)
}

func sorted[V any](m map[string]V) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// findResources waits up to patience for what the tests opened to be
// closed, and describes what is still open.
func findResources(patience time.Duration) []string {
	deadline := time.Now().Add(patience)
	for {
		// A collection first: what the runtime keeps in pools until
		// one (the pipes that io.Copy between sockets splices through,
		// closed by their finalizers) must not be counted, nor waited for
		// until the next one comes by itself (seconds).
		runtime.GC()
		l := leaks(before, take())
		if len(l) == 0 || time.Now().After(deadline) {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeTmpDir removes the directory init made for TMPDIR, and what the
// tests left in it.
func removeTmpDir() {
	if tmpDir != "" {
		os.RemoveAll(tmpDir)
	}
}
