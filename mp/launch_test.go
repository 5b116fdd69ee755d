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
	"sum": func() int { return initAndSum(1) },
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
// output and error, bounded by a minute.
func runRanks(t *testing.T, envs [][]string) (outs []string, errs []error) {
	t.Helper()
	outs, errs = make([]string, len(envs)), make([]error, len(envs))
	var wg sync.WaitGroup
	for i, env := range envs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = env
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
	store, err := net.Listen("tcp", "127.0.0.1:0") // the agent's store
	require.NoError(t, err)
	defer store.Close()
	port := store.Addr().(*net.TCPAddr).Port
	if port == 65535 {
		t.Skip("the store took the last port")
	}
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
	if testing.Short() {
		t.Skip("starts processes")
	}
	env := childEnv("sum", torchrunEnv(0, 2, freePort(t))...)
	env = append(env, "COURIER_TIMEOUT=1s")
	start := time.Now()
	outs, errs := runRanks(t, [][]string{env})
	require.Error(t, errs[0], "a lone rank 0 of 2 ran:\n%s", outs[0])
	for _, w := range []string{"torchrun", "RANK=0", "WORLD_SIZE=2", "no other rank joined"} {
		assert.Contains(t, outs[0], w)
	}
	assert.Less(t, time.Since(start), 30*time.Second)
}
