package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/exampletest"
)

// asRank in the environment makes the test binary the pitfalls program.
const asRank = "PITFALLS_TEST_AS_RANK"

func TestMain(m *testing.M) { exampletest.Main(m, asRank, main) }

// What rank 0 must print: courier's answer to each mistake.
var answers = []string{
	"[0] pitfall 1: a rank sends to itself: works, received [1 2 3]",
	"[0] pitfall 2: both ranks send 8 KiB before receiving: works",
	"[0] pitfall 2: both ranks exchange 8 MiB with Sendrecv: works",
	"[0] pitfall 3: rank 0 sends 1000 × float32, rank 1 receives 500: rank 1 gets ErrTruncate (NCCL: garbage): courier: recv",
	"message truncated: rank 0 sent 1000 × float32 (tag 4) into a buffer of 500 on rank 1",
	"[0] pitfall 4: rank 1 reads a receive's buffer before it completes: Test said done=false and the buffer held [0 0 0 0] before the message; after Wait it holds [7 8 9 10]",
	"[0] pitfall 3: with COURIER_CHECK=1, rank 1 receives 2000 for a send of 1000: ErrMismatch: ",
	"[0] pitfall 4: with COURIER_CHECK=2, rank 0 writes a send buffer before the send completes: ErrModified: ",
	"[0] pitfall 2: both ranks send 8 MiB before receiving: a deadlock, reported at the timeout: courier: send",
}

// The program under courier run, on the host backend and on TCP: every
// answer, and courier run's report of the deadlock's cycle.
func TestPitfallsUnderCourierRun(t *testing.T) {
	t.Parallel()
	courier := exampletest.Courier(t)
	for _, backend := range []string{"host", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(courier, "run", "-np", "2", "--", os.Args[0], "-timeout", "600ms")
			cmd.Env = append(os.Environ(), asRank+"=1", "COURIER_BACKEND="+backend)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.Output()
			require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout, stderr.String())
			for _, w := range answers {
				assert.Contains(t, string(stdout), w)
			}
			assert.Contains(t, stderr.String(), "head-to-head blocking sends: use Sendrecv, or Isend before the receive")
		})
	}
}

// The program started by hand (COURIER_RANK, COURIER_SIZE, COURIER_ADDR),
// as under a launcher without courier run's control channel: the
// deadlock's error itself holds the cycle, which the rank asked the other
// for over the job's connections.
func TestPitfallsByHand(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	outs := make([]*bytes.Buffer, 2)
	cmds := make([]*exec.Cmd, 2)
	for r := range 2 {
		cmd := exec.Command(os.Args[0], "-timeout", "600ms")
		cmd.Env = append(os.Environ(), asRank+"=1", "COURIER_RANK="+strconv.Itoa(r), "COURIER_SIZE=2", "COURIER_ADDR="+addr)
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		require.NoError(t, cmd.Start())
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		assert.NoError(t, cmd.Wait(), "rank %d:\n%s", r, outs[r])
	}
	out := outs[0].String()
	for _, w := range answers {
		assert.Contains(t, out, strings.TrimPrefix(w, "[0] "))
	}
	assert.Contains(t, out, "head-to-head blocking sends: use Sendrecv, or Isend before the receive")
}
