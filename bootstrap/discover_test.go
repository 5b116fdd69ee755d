package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAddrFileName(t *testing.T) {
	long := strings.Repeat("7", 80)
	for _, c := range []struct{ launcher, id, want string }{
		{"openmpi", "779616257", "openmpi-779616257.addr"},
		{"slurm", "4242.3", "slurm-4242.3.addr"},
		{"mpich", "kvs_17624_0_1015286206_vm", "mpich-kvs_17624_0_1015286206_vm.addr"},
		{"pmix", "slurm.pmix.77.0", "pmix-slurm.pmix.77.0.addr"},
		{"slurm", "A-z_0.9", "slurm-A-z_0.9.addr"},
		// Replaced bytes, or a long ID: cut, and followed by a hash of the ID.
		{"pmix", "ns/../x", "pmix-ns_.._x-3bf28b2226cc2f78.addr"},
		{"pmix", "ns_.._x", "pmix-ns_.._x.addr"},
		{"slurm", "a b", "slurm-a_b-c8687a08aa5d6ed2.addr"},
		{"slurm", "ü", "slurm-__-607474ca475a9724.addr"},
		{"slurm", long, "slurm-" + long[:40] + "-ced2ddbc0a04ea6f.addr"},
		{"slurm", strings.Repeat("7", 64), "slurm-" + strings.Repeat("7", 64) + ".addr"},
		{"we/ird", "1", "we_ird-1.addr"},
	} {
		got := addrFileName(c.launcher, c.id)
		if got != c.want {
			t.Errorf("addrFileName(%q, %q) = %q, want %q", c.launcher, c.id, got, c.want)
		}
		if strings.ContainsAny(got, "/\\ \x00") || filepath.Base(got) != got {
			t.Errorf("addrFileName(%q, %q) = %q is not a plain file name", c.launcher, c.id, got)
		}
	}
	// Distinct IDs never share a file, even when their replacements agree.
	seen := map[string]string{}
	for _, id := range []string{"a b", "a_b", "a/b", "a\tb", "a:b", long, long + "8", "ü", "é"} {
		name := addrFileName("slurm", id)
		if other, dup := seen[name]; dup {
			t.Errorf("IDs %q and %q share the file %q", id, other, name)
		}
		seen[name] = id
	}
}

// discoveryJobs describes a job of size ranks launched by launcher with no
// rendezvous address.
func discoveryJobs(size int, launcher, id string) []Job {
	names := map[string][2]string{"openmpi": {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
		"mpich": {"PMI_RANK", "PMI_SIZE"}, "slurm": {"SLURM_PROCID", "SLURM_NTASKS"}}[launcher]
	jobs := make([]Job, size)
	for r := range jobs {
		jobs[r] = Job{Rank: r, Size: size, LocalRank: r, LocalSize: size, Launcher: launcher, JobID: id,
			Key:  derivedKey(launcher, id),
			Vars: []string{fmt.Sprintf("%s=%d", names[0], r), fmt.Sprintf("%s=%d", names[1], size)}}
	}
	return jobs
}

// connectIn runs connect for every job at once, with the address files in
// dir; rank 0 starts after delay.
func connectIn(ctx context.Context, jobs []Job, dir string, delay time.Duration) ([]Exchanger, []error) {
	ex := make([]Exchanger, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for r, j := range jobs {
		wg.Go(func() {
			if r == 0 {
				time.Sleep(delay)
			}
			ex[r], errs[r] = connect(ctx, j, dir)
		})
	}
	wg.Wait()
	return ex, errs
}

// checkGather runs one AllGather over ex and checks every rank's result.
func checkGather(t *testing.T, ex []Exchanger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, errs := gatherAll(ctx, ex, func(r int) []byte { return []byte(fmt.Sprint("rank ", r)) })
	for r := range ex {
		if errs[r] != nil {
			t.Fatalf("rank %d: AllGather: %v", r, errs[r])
		}
		for k, b := range out[r] {
			if want := fmt.Sprint("rank ", k); !bytes.Equal(b, []byte(want)) {
				t.Errorf("rank %d got %q from rank %d, want %q", r, b, k, want)
			}
		}
	}
}

// noFiles fails if dir holds anything.
func noFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("%s left behind in %s", e.Name(), dir)
	}
}

// TestDiscover starts 4 ranks of an mpirun launch with no address: they
// meet through the file, whichever comes first.
func TestDiscover(t *testing.T) {
	t.Parallel() // waits more than it computes
	for _, delay := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run(fmt.Sprint("rank 0 after ", delay), func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ex, errs := connectIn(ctx, discoveryJobs(4, "openmpi", "779616257"), dir, delay)
			defer closeAll(ex)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			checkGather(t, ex)
			noFiles(t, dir) // rank 0 removed the file once every rank joined
		})
	}
}

// TestDiscoverDefaultDir goes through Connect, so through the directory
// under os.TempDir() (pointed at a test directory through TMPDIR).
func TestDiscoverDefaultDir(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" && runtime.GOOS != "freebsd" {
		t.Skip("os.TempDir does not follow TMPDIR here")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("COURIER_IFACE", "")
	if got, want := defaultRunDir(), filepath.Join(tmp, fmt.Sprint("courier-", os.Getuid())); got != want {
		t.Errorf("defaultRunDir() = %q, want %q", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs := discoveryJobs(3, "slurm", "4242.0")
	ex, errs := connectAll(ctx, jobs)
	defer closeAll(ex)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	checkGather(t, ex)
	fi, err := os.Stat(defaultRunDir())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("%s has mode %v, want 0700", defaultRunDir(), fi.Mode().Perm())
	}
	noFiles(t, defaultRunDir())
}

func TestWriteAddrFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, addrFileName("openmpi", "1"))
	if err := writeAddrFile(dir, path, "127.0.0.1:4444"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if addr, err := readAddrFile(dir, path); err != nil || addr != "127.0.0.1:4444" {
		t.Errorf("readAddrFile = %q, %v", addr, err)
	}
	// Replaced in place; only the one file.
	if err := writeAddrFile(dir, path, "[::1]:5555"); err != nil {
		t.Fatal(err)
	}
	if addr, err := readAddrFile(dir, path); err != nil || addr != "[::1]:5555" {
		t.Errorf("readAddrFile = %q, %v", addr, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the directory holds %d entries, want 1", len(ents))
	}
	removeAddrFile(path, "127.0.0.1:4444") // not ours any more: kept
	if _, err := os.Stat(path); err != nil {
		t.Errorf("removeAddrFile removed another job's file: %v", err)
	}
	removeAddrFile(path, "[::1]:5555")
	noFiles(t, dir)

	os.WriteFile(path, []byte("garbage\n"), 0o600)
	if _, err := readAddrFile(dir, path); err == nil || !strings.Contains(err.Error(), "not host:port") {
		t.Errorf("readAddrFile of garbage: %v", err)
	}
	if runtime.GOOS != "windows" {
		os.Chmod(dir, 0o777)
		if _, err := readAddrFile(dir, path); err == nil || !strings.Contains(err.Error(), "writable by others") {
			t.Errorf("readAddrFile in a directory anyone can write: %v", err)
		}
		if err := writeAddrFile(dir, path, "127.0.0.1:1"); err == nil {
			t.Error("writeAddrFile in a directory anyone can write succeeded")
		}
	}
}

// TestDiscoverStaleFile leaves a file of an earlier job with the same ID
// behind, naming a port where nobody listens, then one where a rendezvous
// of another job listens: the ranks that read it keep trying, and meet
// once rank 0 publishes.
func TestDiscoverStaleFile(t *testing.T) {
	t.Parallel() // waits more than it computes
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()

	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	otherCtx, stopOther := context.WithCancel(context.Background())
	otherDone := make(chan error, 1)
	go func() {
		_, err := Connect(otherCtx, Job{Rank: 0, Size: 9, Launcher: "manual", Key: "another job", Listener: other})
		otherDone <- err
	}()
	defer func() {
		stopOther()
		<-otherDone
	}()

	for name, stale := range map[string]string{"nobody listens": deadAddr, "another job": other.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			jobs := discoveryJobs(4, "openmpi", "12345")
			path := filepath.Join(dir, addrFileName("openmpi", "12345"))
			if err := writeAddrFile(dir, path, stale); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ex, errs := connectIn(ctx, jobs, dir, 500*time.Millisecond)
			defer closeAll(ex)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			checkGather(t, ex)
			noFiles(t, dir)
		})
	}
}

// TestDiscoverStaleFileTimeout: with only a stale file, a rank gives up at
// its deadline, naming the address it read, what it saw, and the advice.
func TestDiscoverStaleFileTimeout(t *testing.T) {
	t.Parallel() // waits more than it computes
	dir := t.TempDir()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close()
	path := filepath.Join(dir, addrFileName("openmpi", "12345"))
	if err := writeAddrFile(dir, path, addr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = connect(ctx, discoveryJobs(4, "openmpi", "12345")[2], dir)
	wantErr(t, "rank 2", err, []error{context.DeadlineExceeded}, "rank 2", addr, path, "did not admit",
		"OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=4", "COURIER_ADDR=host:port reachable from every host", "-tags mpi")
	if d := time.Since(start); d > 1300*time.Millisecond {
		t.Errorf("Connect returned %v after a deadline of 300ms", d)
	}
}

// TestDiscoverRefused: rank 0 of this very job turning a rank away (it
// says another size) is final, not retried until the deadline.
func TestDiscoverRefused(t *testing.T) {
	t.Parallel() // waits more than it computes
	dir := t.TempDir()
	jobs := discoveryJobs(3, "slurm", "77")
	jobs[2].Size, jobs[2].LocalSize = 4, 4
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	ex, errs := connectIn(ctx, []Job{jobs[0], jobs[2]}, dir, 0)
	defer closeAll(ex)
	wantErr(t, "rank 2", errs[1], []error{ErrRefused}, "size mismatch")
	wantErr(t, "rank 0", errs[0], []error{ErrRefused}, "size mismatch")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	noFiles(t, dir)
}

// TestDiscoverAlone: a process told it is one of 4 that finds itself
// alone fails at its deadline, naming the launcher's variables.
func TestDiscoverAlone(t *testing.T) {
	t.Parallel() // waits more than it computes
	dir := t.TempDir()
	jobs := discoveryJobs(4, "openmpi", "555")
	for _, r := range []int{0, 3} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		_, err := connect(ctx, jobs[r], dir)
		cancel()
		if d := time.Since(start); d > 1300*time.Millisecond {
			t.Errorf("rank %d: Connect returned %v after a deadline of 300ms", r, d)
		}
		vars := fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d OMPI_COMM_WORLD_SIZE=4", r)
		if r == 0 {
			wantErr(t, "rank 0", err, []error{ErrPeerLost, context.DeadlineExceeded}, "ranks [1 2 3]",
				"no other rank joined", "there are 4", "started alone", vars, `launcher "openmpi"`, `job ID "555"`,
				"COURIER_ADDR=host:port reachable from every host", "-tags mpi")
		} else {
			wantErr(t, "rank 3", err, []error{context.DeadlineExceeded}, "never published", vars,
				"COURIER_ADDR=host:port reachable from every host", "-tags mpi")
		}
	}
	noFiles(t, dir)
}

// TestManualAlone: by hand, COURIER_SIZE=4 and nobody else: rank 0's
// error names the variables and says it is alone.
func TestManualAlone(t *testing.T) {
	t.Parallel() // waits more than it computes
	jobs := newJobs(t, 4, "s3cret")
	jobs[0].Vars = []string{"COURIER_RANK=0", "COURIER_SIZE=4"}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Connect(ctx, jobs[0])
	wantErr(t, "rank 0", err, []error{ErrPeerLost, context.DeadlineExceeded}, "ranks [1 2 3]",
		"no other rank joined", "started alone", "COURIER_RANK=0 COURIER_SIZE=4")
}

// TestDiscoverCannot: several hosts, or no job ID: an error at once,
// saying what to set.
func TestDiscoverCannot(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		name  string
		job   Job
		texts []string
	}{
		{"several hosts", Job{Rank: 1, Size: 4, LocalSize: 2, Launcher: "openmpi", JobID: "1",
			Vars: []string{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4"}},
			[]string{"several hosts", "2 on this one", "set COURIER_ADDR=host:port reachable from every host", "or build with -tags mpi",
				"OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4"}},
		{"several hosts, rank 0", Job{Rank: 0, Size: 4, LocalSize: 3, Launcher: "slurm", JobID: "1"},
			[]string{"several hosts", "set COURIER_ADDR=host:port reachable from every host", "or build with -tags mpi"}},
		{"no job ID", Job{Rank: 1, Size: 4, LocalSize: 4, Launcher: "openmpi",
			Vars: []string{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4"}},
			[]string{"no job ID", "OMPI_MCA_ess_base_jobid", "COURIER_ADDR", "-tags mpi", "OMPI_COMM_WORLD_RANK=1"}},
		{"no job ID, mpich", Job{Rank: 0, Size: 2, Launcher: "mpich"},
			[]string{"no job ID", "PMI_FD", "COURIER_ADDR"}},
		{"by hand", Job{Rank: 0, Size: 2, Launcher: "manual", Vars: []string{"COURIER_RANK=0", "COURIER_SIZE=2"}},
			[]string{"COURIER_ADDR=host:port of rank 0", "COURIER_RANK=0 COURIER_SIZE=2"}},
	} {
		start := time.Now()
		_, err := connect(ctx, c.job, dir)
		wantErr(t, c.name, err, []error{ErrNoRendezvous}, c.texts...)
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: took %v", c.name, d)
		}
	}
	noFiles(t, dir)
}

// TestIface: a wrong COURIER_IFACE fails at once, before any wait, naming
// the value and the host's interfaces; a right one is where rank 0 listens.
func TestIface(t *testing.T) {
	for _, bad := range []string{"nosuch0", "203.0.113.77"} {
		t.Setenv("COURIER_IFACE", bad)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		for _, job := range []Job{
			{Rank: 0, Size: 2, Launcher: "courier", Listener: ln},
			{Rank: 1, Size: 2, Launcher: "manual", Addr: "127.0.0.1:1"},
			{Rank: 1, Size: 2, Launcher: "openmpi", JobID: "1"},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			_, err := connect(ctx, job, t.TempDir())
			cancel()
			wantErr(t, bad, err, []error{ErrBadEnv}, fmt.Sprintf("bad COURIER_IFACE %q: ", bad), "this host has: ")
			if d := time.Since(start); d > time.Second {
				t.Errorf("COURIER_IFACE=%s: failed after %v", bad, d)
			}
		}
		if _, err := ln.Accept(); err == nil {
			t.Error("Connect left the listener open")
		}
	}
	// Size 1 listens nowhere: no check.
	if _, err := Connect(context.Background(), Job{Rank: 0, Size: 1}); err != nil {
		t.Errorf("Size 1 with a wrong COURIER_IFACE: %v", err)
	}

	iface := "127.0.0.2" // all of 127/8 is loopback on Linux
	if runtime.GOOS != "linux" {
		iface = "127.0.0.1"
	}
	t.Setenv("COURIER_IFACE", iface)
	dir := t.TempDir()
	jobs := discoveryJobs(2, "mpich", "kvs_1_0_2_vm")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex := make([]Exchanger, 2)
	errs := make([]error, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ex[0], errs[0] = connect(ctx, jobs[0], dir)
	}()
	path := filepath.Join(dir, addrFileName("mpich", "kvs_1_0_2_vm"))
	var addr string
	for ctx.Err() == nil {
		var err error
		if addr, err = readAddrFile(dir, path); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if host, _, _ := net.SplitHostPort(addr); host != iface {
		t.Errorf("rank 0 published %q, want an address on %s", addr, iface)
	}
	ex[1], errs[1] = connect(ctx, jobs[1], dir)
	<-done
	defer closeAll(ex)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	checkGather(t, ex)
}
