package mp_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// launchRoles are the roles of a child process (COURIER_TEST_ROLE) that
// call mp.Init themselves, as a program under a launcher does.
var launchRoles = map[string]func() int{
	"sum":      func() int { return initAndSum(1) },
	"twice":    func() int { return initAndSum(2) },
	"together": initTogether,
}

// initTogether calls Init twice at once, from two goroutines; on each
// communicator it runs an Allreduce of a contribution that says which
// goroutine made it (rank+1, or 10·(rank+1)), and prints "together: rank
// R of N, sums S1 S2", the sums in increasing order.
func initTogether() int {
	var sums [2]int
	var errs [2]error
	var rank, size int
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			comm, err := mp.Init(context.Background())
			if err != nil {
				errs[g] = err
				return
			}
			sum := []int{(comm.Rank() + 1) * []int{1, 10}[g]}
			err = mp.Allreduce(comm, sum, sum, mp.Sum)
			if cerr := comm.Close(); err == nil {
				err = cerr
			}
			errs[g], sums[g] = err, sum[0]
			if g == 0 {
				rank, size = comm.Rank(), comm.Size()
			}
		})
	}
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			fmt.Printf("together %d: %v\n", g, err)
			return 1
		}
	}
	fmt.Printf("together: rank %d of %d, sums %d %d\n", rank, size, min(sums[0], sums[1]), max(sums[0], sums[1]))
	return 0
}

// initAndSum calls Init times, one after the other; on each
// communicator it checks an Allreduce of the ranks' numbers and prints
// "init I: rank R of N, sum S".
func initAndSum(times int) int {
	for i := range times {
		comm, err := mp.Init(context.Background())
		if err != nil {
			fmt.Printf("init %d: %v\n", i, err)
			return 1
		}
		sum := []int{comm.Rank() + 1}
		err = mp.Allreduce(comm, sum, sum, mp.Sum)
		if cerr := comm.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Printf("init %d: rank %d: %v\n", i, comm.Rank(), err)
			return 1
		}
		fmt.Printf("init %d: rank %d of %d, sum %d\n", i, comm.Rank(), comm.Size(), sum[0])
	}
	return 0
}

// childEnv is the environment of a child rank: this process's, without
// any launcher's variables (the tests may themselves run under one),
// plus vars.
func childEnv(role string, vars ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "COURIER_"), strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "PMI"),
			strings.HasPrefix(k, "SLURM_"), strings.HasPrefix(k, "TORCHELASTIC_"), strings.HasPrefix(k, "FLUX_"),
			strings.HasPrefix(k, "JSM_"):
			continue
		}
		switch k {
		case "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT":
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "COURIER_TEST_ROLE="+role, "COURIER_TIMEOUT=20s"), vars...)
}

// runRanks starts one child per environment and returns each one's
// output and error, bounded by a minute. files, if given, are the
// descriptors from 3 on of the children (as exec.Cmd.ExtraFiles).
func runRanks(t *testing.T, envs [][]string, files ...[]*os.File) (outs []string, errs []error) {
	t.Helper()
	outs, errs = make([]string, len(envs)), make([]error, len(envs))
	var wg sync.WaitGroup
	for i, env := range envs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = env
		if i < len(files) {
			cmd.ExtraFiles = files[i]
		}
		wg.Go(func() {
			out, err := cmd.CombinedOutput()
			outs[i], errs[i] = string(out), err
		})
	}
	wg.Wait()
	return outs, errs
}

// freePort returns a port nothing listens on at the moment.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// agentStore listens on a port whose next one is free at the moment, as
// torchrun's agent store does on MASTER_PORT.
func agentStore(t *testing.T) (net.Listener, int) {
	for range 100 {
		store, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := store.Addr().(*net.TCPAddr).Port
		if next, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+1)); err == nil {
			next.Close()
			return store, port
		}
		store.Close()
	}
	t.Fatal("no port with a free next one")
	return nil, 0
}

// masterPort returns a MASTER_PORT whose next port, where rank 0's
// rendezvous will listen, is free at the moment.
func masterPort(t *testing.T) int { return freePort(t) - 1 }

// torchrunEnv is what torchrun --nproc_per_node=n gives worker rank.
func torchrunEnv(rank, n, port int) []string {
	return []string{"RANK=" + strconv.Itoa(rank), "WORLD_SIZE=" + strconv.Itoa(n),
		"LOCAL_RANK=" + strconv.Itoa(rank), "LOCAL_WORLD_SIZE=" + strconv.Itoa(n),
		"GROUP_RANK=0", "ROLE_RANK=" + strconv.Itoa(rank), "ROLE_WORLD_SIZE=" + strconv.Itoa(n),
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port),
		"TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_RESTART_COUNT=0", "TORCHELASTIC_MAX_RESTARTS=0",
		"TORCHELASTIC_USE_AGENT_STORE=True"}
}

// TestTorchrun starts two processes with the environment torchrun
// --nproc_per_node=2 gives its workers, while something (as torchrun's
// agent store does) holds MASTER_PORT: they run as ranks 0 and 1 of 2.
func TestTorchrun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	store, port := agentStore(t)
	defer store.Close()
	outs, errs := runRanks(t, [][]string{
		childEnv("sum", torchrunEnv(0, 2, port)...),
		childEnv("sum", torchrunEnv(1, 2, port)...),
	})
	for r := range 2 {
		require.NoError(t, errs[r], "rank %d:\n%s", r, outs[r])
		assert.Contains(t, outs[r], fmt.Sprintf("init 0: rank %d of 2, sum 3", r))
	}
}

// TestTorchrunAlone: a process whose torchrun environment says it is one
// of 2, started alone, fails naming the variables, instead of running as
// a job of one.
func TestTorchrunAlone(t *testing.T) {
	t.Parallel() // waits more than it computes
	if testing.Short() {
		t.Skip("starts processes")
	}
	env := childEnv("sum", torchrunEnv(0, 2, masterPort(t))...)
	env = append(env, "COURIER_TIMEOUT=1s")
	start := time.Now()
	outs, errs := runRanks(t, [][]string{env})
	require.Error(t, errs[0], "a lone rank 0 of 2 ran:\n%s", outs[0])
	for _, w := range []string{"torchrun", "RANK=0", "WORLD_SIZE=2", "no other rank joined"} {
		assert.Contains(t, outs[0], w)
	}
	assert.Less(t, time.Since(start), 30*time.Second)
}

// launches are the environments of a 2-rank job under each launcher
// courier understands without MPI, for a child role: courier run (rank 0
// inherits the listening socket), by hand (COURIER_ADDR), torchrun, and
// mpirun (the ranks meet through the address file).
func launches(t *testing.T, role string) map[string]func() ([][]string, [][]*os.File) {
	return map[string]func() ([][]string, [][]*os.File){
		"courier run": func() ([][]string, [][]*os.File) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			f, err := ln.(*net.TCPListener).File()
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			common := []string{"COURIER_SIZE=2", "COURIER_ADDR=" + ln.Addr().String(), "COURIER_JOB_KEY=k-" + t.Name()}
			return [][]string{
				childEnv(role, append(common, "COURIER_RANK=0", "COURIER_RENDEZVOUS_FD=3")...),
				childEnv(role, append(common, "COURIER_RANK=1")...),
			}, [][]*os.File{{f}}
		},
		"by hand": func() ([][]string, [][]*os.File) {
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			common := []string{"COURIER_SIZE=2", "COURIER_ADDR=" + addr, "COURIER_JOB_KEY=k-" + t.Name()}
			return [][]string{childEnv(role, append(common, "COURIER_RANK=0")...),
				childEnv(role, append(common, "COURIER_RANK=1")...)}, nil
		},
		"torchrun": func() ([][]string, [][]*os.File) {
			port := masterPort(t)
			return [][]string{childEnv(role, torchrunEnv(0, 2, port)...), childEnv(role, torchrunEnv(1, 2, port)...)}, nil
		},
		"mpirun": func() ([][]string, [][]*os.File) {
			tmp := t.TempDir()
			job := []string{"OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2", "TMPDIR=" + tmp,
				"OMPI_MCA_ess_base_jobid=" + strconv.FormatInt(time.Now().UnixNano(), 10)}
			return [][]string{
				childEnv(role, append(job, "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_LOCAL_RANK=0")...),
				childEnv(role, append(job, "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_LOCAL_RANK=1")...),
			}, nil
		},
	}
}

// TestInitTwice: under every launcher, each process calls Init, uses the
// communicator, closes it, and calls Init again: both work.
func TestInitTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for name, launch := range launches(t, "twice") {
		t.Run(name, func(t *testing.T) {
			envs, files := launch()
			outs, errs := runRanks(t, envs, files...)
			for r := range 2 {
				require.NoError(t, errs[r], "rank %d:\n%s", r, outs[r])
				for i := range 2 {
					assert.Contains(t, outs[r], fmt.Sprintf("init %d: rank %d of 2, sum 3", i, r))
				}
			}
		})
	}
}

// TestInitTogether: under every launcher, each process calls Init twice
// at once: both communicators work, and each pairs one goroutine's Init
// on rank 0 with one on rank 1 (the sums agree between the ranks).
func TestInitTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for name, launch := range launches(t, "together") {
		t.Run(name, func(t *testing.T) {
			envs, files := launch()
			outs, errs := runRanks(t, envs, files...)
			var sums [2]string
			for r := range 2 {
				require.NoError(t, errs[r], "rank %d:\n%s", r, outs[r])
				prefix := fmt.Sprintf("together: rank %d of 2, sums ", r)
				require.Contains(t, outs[r], prefix)
				sums[r] = strings.TrimSpace(outs[r][strings.Index(outs[r], prefix)+len(prefix):])
			}
			assert.Equal(t, sums[0], sums[1], "the two ranks' sums")
			assert.Contains(t, []string{"3 30", "12 21"}, sums[0])
		})
	}
}
