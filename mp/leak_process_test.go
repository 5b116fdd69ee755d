package mp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/leakcheck"
	"github.com/courier-mp/courier/mp"
)

func init() {
	launchRoles["leak-survivor"] = leakSurvivor
	launchRoles["leak-victim"] = leakVictim
}

// leakSurvivor is a rank of a job that loses rank 2: it prints "ready"
// once Init returns, waits in a receive from rank 2 until rank 2 is
// killed, closes its communicator, and prints "left: none" when the
// process holds no goroutine, descriptor or shared-memory mapping it did
// not hold before Init, or "left: " and what it does.
func leakSurvivor() int {
	comm, err := mp.Init(context.Background())
	if err != nil {
		fmt.Println("init:", err)
		return 1
	}
	fmt.Println("ready")
	_, err = mp.Recv(comm, make([]byte, 8), 2, 0)
	if !errors.Is(err, mp.ErrPeerLost) {
		fmt.Println("recv from the killed rank:", err)
		return 1
	}
	comm.Close() // its error says rank 2 is lost
	if err := leakcheck.Remaining(2 * time.Second); err != nil {
		fmt.Println("left:", strings.ReplaceAll(err.Error(), "\n", " | "))
		return 0
	}
	fmt.Println("left: none")
	return 0
}

// leakVictim is a rank that says "ready" after Init and waits to be
// killed.
func leakVictim() int {
	if _, err := mp.Init(context.Background()); err != nil {
		fmt.Println("init:", err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

// flux is the environment of rank r of n under a Flux launch of one node
// (job ID id): the ranks meet through rank 0's address file, the
// discovery that writes to the file system.
func flux(r, n int, id string) []string {
	return []string{"FLUX_TASK_RANK=" + strconv.Itoa(r), "FLUX_JOB_SIZE=" + strconv.Itoa(n),
		"FLUX_TASK_LOCAL_ID=" + strconv.Itoa(r), "FLUX_JOB_NNODES=1", "FLUX_JOB_ID=" + id}
}

// startRanks starts n ranks of this test binary, rank r with env(r) added
// to its environment (its role, its launch) and COURIER_TIMEOUT=20s, and
// waits for each to say "ready". It returns the processes and their
// output; they are killed when t ends.
func startRanks(t *testing.T, n int, env func(r int) []string) ([]*exec.Cmd, []*bufio.Scanner) {
	procs := make([]*exec.Cmd, n)
	outs := make([]*bufio.Scanner, n)
	for r := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), "COURIER_TIMEOUT=20s"), env(r)...)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		procs[r], outs[r] = cmd, bufio.NewScanner(out)
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	for r, s := range outs {
		require.True(t, s.Scan(), "rank %d printed nothing", r)
		require.Equal(t, "ready", s.Text(), "rank %d", r)
	}
	return procs, outs
}

// fluxRanks is startRanks's environment for rank r of n in roles(r),
// under a Flux launch with job ID id and TMPDIR tmp, on backend.
func fluxRanks(n int, id, tmp, backend string, role func(r int) string) func(r int) []string {
	return func(r int) []string {
		return append(flux(r, n, id), "COURIER_TEST_ROLE="+role(r), "TMPDIR="+tmp, "COURIER_BACKEND="+backend)
	}
}

// requireNothingLeft fails t when the job that ran with TMPDIR tmp left
// anything behind (leakcheck.LeftByJob).
func requireNothingLeft(t *testing.T, tmp string, shmBefore map[string]bool) {
	t.Helper()
	for _, left := range leakcheck.LeftByJob(tmp, shmBefore) {
		t.Error(left)
	}
}

// TestLostPeerLeavesNothing runs three ranks that meet through an address
// file, on the host backend (shared memory among them) and on tcp, and
// kills rank 2 with SIGKILL while the others wait for it: each survivor's
// receive ends with ErrPeerLost, and after its Close the survivor holds no
// goroutine, file descriptor or shared-memory mapping that it did not hold
// before Init (the leak check of its own process). Once the job has
// ended, nothing of it is left in the address-file directory or in
// /dev/shm.
func TestLostPeerLeavesNothing(t *testing.T) {
	for _, backend := range []string{"host", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			tmp := t.TempDir()
			shmBefore := leakcheck.DevShm()
			procs, outs := startRanks(t, 3, fluxRanks(3, "leak-lost-"+backend, tmp, backend, func(r int) string {
				return map[bool]string{true: "leak-victim", false: "leak-survivor"}[r == 2]
			}))
			require.NoError(t, procs[2].Process.Signal(syscall.SIGKILL))
			procs[2].Wait()
			for r := range 2 {
				require.True(t, outs[r].Scan(), "rank %d ended without a word", r)
				require.Equal(t, "left: none", outs[r].Text(), "rank %d", r)
				require.NoError(t, procs[r].Wait(), "rank %d", r)
			}
			requireNothingLeft(t, tmp, shmBefore)
		})
	}
}

// TestKilledJobLeavesNothing kills every rank of a job with SIGKILL once
// Init has returned in each, over shared memory and over TCP: nothing is
// left in the address-file directory or in /dev/shm.
func TestKilledJobLeavesNothing(t *testing.T) {
	for _, backend := range []string{"host", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			tmp := t.TempDir()
			shmBefore := leakcheck.DevShm()
			procs, _ := startRanks(t, 3, fluxRanks(3, "leak-killed-"+backend, tmp, backend, func(int) string { return "leak-victim" }))
			for _, p := range procs {
				require.NoError(t, p.Process.Signal(syscall.SIGKILL))
			}
			for _, p := range procs {
				p.Wait()
			}
			requireNothingLeft(t, tmp, shmBefore)
		})
	}
}
