package mp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/mp"
)

func init() { launchRoles["shrink-sum"] = shrinkSumRank }

// shrinkSumRank is one rank of TestShrinkKilledRank: Allreduces of
// rank + 1 over four ranks until one is killed, then Shrink, then 100
// more over the three left, each checked.
func shrinkSumRank() int {
	comm, err := mp.Init(context.Background())
	if err != nil {
		fmt.Println("init:", err)
		return 1
	}
	defer comm.Close()
	var lostErr error
	for step := 0; lostErr == nil; step++ {
		v := []int64{int64(comm.Rank() + 1)}
		if err := mp.Allreduce(comm, v, v, mp.Sum); err != nil {
			lostErr = err
			break
		}
		if v[0] != 1+2+3+4 {
			fmt.Printf("step %d: sum %d, want 10\n", step, v[0])
			return 1
		}
		if step == 50 {
			fmt.Println("computing") // the test kills rank 3 when it says so
		}
		if step == 1_000_000 {
			fmt.Println("no rank was lost")
			return 1
		}
	}
	lost := -1
	if oe, ok := errors.AsType[*mp.OpError](lostErr); ok {
		lost, _ = oe.LostRank()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	s, err := comm.Shrink(ctx)
	if err != nil {
		fmt.Println("shrink:", err)
		return 1
	}
	defer s.Close()
	took := time.Since(start)
	for step := range 100 {
		v := []int64{int64(comm.Rank() + 1)}
		if err := mp.Allreduce(s, v, v, mp.Sum); err != nil {
			fmt.Println("allreduce on the survivors:", err)
			return 1
		}
		if v[0] != 1+2+3 {
			fmt.Printf("survivors' step %d: sum %d, want 6\n", step, v[0])
			return 1
		}
	}
	fmt.Printf("finished: peer-lost %v, lost rank %d, size %d, rank %d, shrink took %v\n",
		errors.Is(lostErr, mp.ErrPeerLost), lost, s.Size(), s.Rank(), took.Round(time.Millisecond))
	return 0
}

// TestShrinkKilledRank: four ranks, each a process, sum with Allreduce;
// rank 3 is killed with SIGKILL while they compute. The three survivors'
// Allreduces end with ErrPeerLost naming rank 3; they Shrink and finish
// 100 more sums over the three, each 1 + 2 + 3. Over shared memory (the
// host backend), over TCP, and over NCCL where four GPUs are (the
// survivors' NCCL communicators are new ones, made in Shrink).
func TestShrinkKilledRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, be := range []string{"host", "tcp", "nccl"} {
		t.Run(be, func(t *testing.T) {
			if be == "nccl" {
				needGPUs(t, 4) // NCCL takes one GPU per rank
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			addr := ln.Addr().String()
			ln.Close() // rank 0 binds it again
			const n = 4
			var procs [n]*exec.Cmd
			var outs [n]*bufio.Scanner
			for i := range procs {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), "COURIER_TEST_ROLE=shrink-sum",
					fmt.Sprintf("COURIER_RANK=%d", i), fmt.Sprintf("COURIER_SIZE=%d", n), "COURIER_ADDR="+addr,
					"COURIER_JOB_KEY=shrink-test-key", "COURIER_TIMEOUT=20s", "COURIER_BACKEND="+be,
					fmt.Sprintf("COURIER_LOCAL_RANK=%d", i), fmt.Sprintf("COURIER_LOCAL_SIZE=%d", n), "NCCL_NVLS_ENABLE=0")
				out, err := cmd.StdoutPipe()
				require.NoError(t, err)
				cmd.Stderr = os.Stderr
				require.NoError(t, cmd.Start())
				procs[i], outs[i] = cmd, bufio.NewScanner(out)
				t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			}
			lines := make([]chan string, n)
			for i, s := range outs {
				lines[i] = make(chan string, 16)
				go func() {
					for s.Scan() {
						lines[i] <- s.Text()
					}
					close(lines[i])
				}()
			}
			select {
			case line := <-lines[3]:
				require.Equal(t, "computing", line)
			case <-time.After(30 * time.Second):
				t.Fatal("rank 3 did not start computing")
			}
			require.NoError(t, procs[3].Process.Signal(syscall.SIGKILL))
			for i := range n - 1 {
				var last string
				deadline := time.After(15 * time.Second)
			read:
				for {
					select {
					case line, ok := <-lines[i]:
						if !ok {
							break read
						}
						last = line
					case <-deadline:
						t.Fatalf("rank %d did not finish within 15 s of the kill (last line %q)", i, last)
					}
				}
				require.NoError(t, procs[i].Wait(), "rank %d: %s", i, last)
				require.True(t, strings.HasPrefix(last, "finished: peer-lost true, lost rank 3, size 3, rank "+fmt.Sprint(i)+","),
					"rank %d: %s", i, last)
				t.Logf("rank %d: %s", i, last)
			}
		})
	}
}

// needGPUs skips t unless the nccl backend works here with n GPUs; with
// COURIER_REQUIRE_GPU=N (N >= n) it fails instead.
func needGPUs(t *testing.T, n int) {
	t.Helper()
	err := ncclAvailable()
	have := 0
	if err == nil {
		if have, err = cuda.DeviceCount(); err == nil && have >= n {
			return
		}
	}
	why := fmt.Sprintf("%d GPU(s), %d needed", have, n)
	if err != nil {
		why = err.Error()
	}
	if req, _ := strconv.Atoi(os.Getenv("COURIER_REQUIRE_GPU")); req >= n {
		t.Fatalf("COURIER_REQUIRE_GPU=%d, but here: %s", req, why)
	}
	t.Skipf("the nccl backend with %d GPUs is not available here: %s", n, why)
}

// ncclAvailable is the nccl driver's Available.
func ncclAvailable() error {
	d, ok := backend.Lookup("nccl")
	if !ok {
		return fmt.Errorf("%w: no nccl driver registered", mp.ErrNotSupported)
	}
	if a, ok := d.(backend.Availability); ok {
		return a.Available()
	}
	return nil
}
