package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/leakcheck"
)

// TestKilledRunLeavesNothing kills courier run itself with SIGKILL while
// its three ranks wait in a receive (mp.Init done, shared memory among
// them): every rank ends (the kernel's parent-death signal), and the job
// leaves nothing in the address-file directory or in /dev/shm.
func TestKilledRunLeavesNothing(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	shmBefore := leakcheck.DevShm()
	cmd, _, _, _ := startReady(t, 3, "hang", 20*time.Second, "TMPDIR="+tmp)
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
	for _, left := range leakcheck.LeftByJob(tmp, shmBefore) {
		t.Error(left)
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
