package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKilledRunLeavesNothing kills courier run itself with SIGKILL while
// its three ranks wait in a receive (mp.Init done, shared memory among
// them): every rank ends (the kernel's parent-death signal), and the job
// leaves nothing in the address-file directory or in /dev/shm.
func TestKilledRunLeavesNothing(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	shmBefore := courierShm()
	cmd := exec.Command(os.Args[0], append([]string{asCourier, "run", "-np", "3"}, rankArgs("hang")...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	sc := bufio.NewScanner(out)
	for ready := 0; ready < 3 && sc.Scan(); {
		if strings.HasSuffix(sc.Text(), "] ready") {
			ready++
		}
	}
	ranks := children(cmd.Process.Pid)
	if len(ranks) != 3 {
		t.Fatalf("courier run has %d children (%v), want its 3 ranks", len(ranks), ranks)
	}
	for _, pid := range ranks {
		if !alive(pid) {
			t.Fatalf("rank process %d ended before courier run was killed", pid)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range ranks {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("rank process %d outlived courier run by 5 s", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(tmp, "courier-"+strconv.Itoa(os.Getuid())))
	for _, e := range ents {
		t.Errorf("the job left %s in the address-file directory", e.Name())
	}
	for name := range courierShm() {
		if !shmBefore[name] {
			t.Errorf("the job left /dev/shm/%s", name)
		}
	}
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// alive reports whether process pid runs (it exists, and is not a zombie
// waiting for a parent that does not reap it).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// courierShm lists the entries of /dev/shm whose names are courier's.
func courierShm() map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir("/dev/shm")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "courier") {
			out[e.Name()] = true
		}
	}
	return out
}
