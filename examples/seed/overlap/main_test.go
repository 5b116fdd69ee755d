package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/examples/seed/internal/work"
	"github.com/courier-mp/courier/internal/exampletest"
)

// asRank in the environment makes the test binary the overlap program.
const asRank = "OVERLAP_TEST_AS_RANK"

func TestMain(m *testing.M) { exampletest.Main(m, asRank, main) }

// The work of the test's runs, small enough for a second or so.
const (
	testN       = 48
	testSize    = 1 << 20
	testGPUN    = 64
	testGPUSize = 1 << 20
)

var testFlags = []string{"-n", strconv.Itoa(testN), "-size", "1MiB", "-gpu-n", strconv.Itoa(testGPUN), "-gpu-size", "1MiB", "-reps", "2"}

// The program under courier run on the host backend and on TCP: each
// part's three times, positive, and the speed-up they make; every product
// exact; the message's checksum on both ranks the one of what rank 0
// filled in. With -device, the GPU part too where there is a GPU, else the
// line that says it was skipped (a failure where COURIER_REQUIRE_GPU asks
// for a GPU).
func TestOverlapUnderCourierRun(t *testing.T) {
	t.Parallel()
	courier := exampletest.Courier(t)
	for _, c := range []struct {
		backend string
		device  bool
	}{{"host", false}, {"tcp", false}, {"host", true}, {"tcp", true}} {
		name := c.backend
		if c.device {
			name += "-device"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"run", "-np", "2", "--", os.Args[0]}, testFlags...)
			if c.device {
				args = append(args, "-device")
			}
			cmd := exec.Command(courier, args...)
			cmd.Env = append(os.Environ(), asRank+"=1", "COURIER_BACKEND="+c.backend, "COURIER_TIMEOUT=60s")
			stdout, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", stdout)
			out := string(stdout)
			checkPart(t, out, "cpu", testN, testSize)
			if !c.device {
				assert.NotContains(t, out, "[1] gpu")
				return
			}
			if gpuSkipped(t, out) {
				return
			}
			checkPart(t, out, "gpu", testGPUN, testGPUSize)
			assert.Contains(t, out, "[1] gpu WaitOn: rank 1's kernel behind req.WaitOn(compute stream) multiplied by the whole message (8 rows checked: exact)")
		})
	}
}

// The GPU part on the fake GPU of backend/nccl's tests, so that its code
// runs where there is no GPU: device memory staged through the host (host,
// tcp), and on nccl two ranks on the fake's GPU 0 meeting through the
// CUDA IPC path, where WaitOn makes the compute stream wait on the (fake)
// GPU; the message posted with Isend/Irecv and, with -on-stream, with
// IsendOnStream/IrecvOnStream. The fake runs sgemm in C (only over the
// elements the grid covers), so this checks the program around the PTX,
// its launches and its ordering; the PTX itself runs on a GPU only
// (examples/seed/internal/work's TestKernelGPU).
func TestOverlapOnFakeGPU(t *testing.T) {
	t.Parallel()
	courier := exampletest.Courier(t)
	fake := exampletest.FakeGPU(t)
	for _, c := range []struct {
		backend  string
		onStream bool
	}{{"host", false}, {"tcp", false}, {"nccl", false}, {"nccl", true}, {"tcp", true}} {
		name := c.backend
		if c.onStream {
			name += "-on-stream"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"run", "-np", "2", "--", os.Args[0], "-device"}, testFlags...)
			if c.onStream {
				args = append(args, "-on-stream")
			}
			cmd := exec.Command(courier, args...)
			cmd.Env = append(append(os.Environ(), fake...), asRank+"=1", "COURIER_BACKEND="+c.backend, "COURIER_DEVICE=0", "COURIER_TIMEOUT=60s")
			stdout, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", stdout)
			out := string(stdout)
			checkPart(t, out, "cpu", testN, testSize)
			how := "(Isend/Irecv)"
			if c.onStream {
				how = "(IsendOnStream/IrecvOnStream on a communication stream)"
			}
			assert.Contains(t, out, "[1] gpu: cuda:0 (Fake GPU 0) a rank, sgemm 64×64 ×2 a phase and one behind WaitOn")
			assert.Contains(t, out, "message of device memory "+how)
			checkPart(t, out, "gpu", testGPUN, testGPUSize)
			assert.Contains(t, out, "[1] gpu WaitOn: rank 1's kernel behind req.WaitOn(compute stream) multiplied by the whole message (8 rows checked: exact)")
		})
	}
}

// checkPart checks what the program printed of one part, whose matrices
// have order n and whose message has size bytes.
func checkPart(t *testing.T, out, part string, n, size int) {
	t.Helper()
	ms := map[string]float64{}
	for _, phase := range []string{"compute only", "transfer only", "overlapped"} {
		m := regexp.MustCompile(`\[1\] ` + part + ` ` + phase + `: +([0-9]+\.[0-9]{3}) ms\n`).FindStringSubmatch(out)
		if !assert.NotNil(t, m, "%s %s in:\n%s", part, phase, out) {
			return
		}
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		assert.Positive(t, v, "%s %s", part, phase)
		ms[phase] = v
	}
	m := regexp.MustCompile(`\[1\] ` + part + ` speed-up \(compute\+transfer\)/overlapped: ([0-9]+\.[0-9]{2})\n`).FindStringSubmatch(out)
	if assert.NotNil(t, m, "%s speed-up in:\n%s", part, out) && ms["overlapped"] > 0 {
		got, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		want := (ms["compute only"] + ms["transfer only"]) / ms["overlapped"]
		// The times are printed to the microsecond (±0.0005 ms) and the
		// speed-up to the hundredth: the one made of the times printed is
		// within their rounding of the one printed.
		slack := 0.0051 + (0.001+0.0005*want)/ms["overlapped"]
		assert.InDelta(t, want, got, slack, "%s speed-up %v from the times printed %v", part, got, ms)
	}
	assert.Contains(t, out, fmt.Sprintf("[1] %s matmul: 8 rows of %d checked on each rank: exact\n", part, n))

	// What rank 0 sent is Fill's pattern 3 (the program's message).
	sent := make([]float32, size/4)
	work.Fill(sent, 3)
	want := fmt.Sprintf("%08x", work.Checksum(sent))
	m = regexp.MustCompile(`\[1\] ` + part + ` message: rank 0 sent checksum ([0-9a-f]{8}), rank 1 received ([0-9a-f]{8}): match\n`).FindStringSubmatch(out)
	if assert.NotNil(t, m, "%s message in:\n%s", part, out) {
		assert.Equal(t, want, m[1], "the checksum rank 0 sent")
		assert.Equal(t, want, m[2], "the checksum rank 1 received")
	}
}

// gpuSkipped reports whether the program said that it skipped the GPU
// part, which fails t where COURIER_REQUIRE_GPU asks for a GPU (1 or
// more).
func gpuSkipped(t *testing.T, out string) bool {
	t.Helper()
	line := regexp.MustCompile(`\[1\] gpu: skipped, no GPU here \(.*\)`).FindString(out)
	if line == "" {
		return false
	}
	if v := os.Getenv("COURIER_REQUIRE_GPU"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("COURIER_REQUIRE_GPU=%q: want the number of GPUs required (1 for one)", v)
		}
		if n >= 1 {
			t.Fatalf("COURIER_REQUIRE_GPU=%d, but the GPU part was skipped: %s", n, line)
		}
	}
	t.Log("the GPU part was skipped:", line)
	return true
}

// Bad command lines fail at once, before the ranks meet, with exit status
// 2 and a line naming the flag.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "0"}, "-n 0: must be at least 1"},
		{[]string{"-gpu-n", "70000"}, "-gpu-n 70000: must be 1 to 65535"},
		{[]string{"-iters", "0"}, "-iters 0, -reps 3: must be at least 1"},
		{[]string{"-reps", "-1"}, "-iters 2, -reps -1: must be at least 1"},
		{[]string{"-size", "6"}, "-size 6 B: must be a multiple of 4 bytes"},
		{[]string{"-size", "0"}, "-size 0 B: must be a multiple of 4 bytes"},
		{[]string{"-size", "lots"}, `size "lots": want a whole number of bytes`},
		{[]string{"-gpu-n", "1024", "-gpu-size", "1MiB"}, "-gpu-size 1 MiB: must be a multiple of 4 bytes holding at least gpu-n² = 1048576 float32s"},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, err := parse(c.args, io.Discard)
		if assert.Error(t, err, "%q", c.args) {
			assert.Contains(t, err.Error(), c.want, "%q", c.args)
		}
	}
	_, err := parse(nil, io.Discard)
	assert.NoError(t, err, "the defaults")

	// The binary itself: no launcher, no rank: the flag is what fails.
	cmd := exec.Command(os.Args[0], "-n", "0")
	cmd.Env = append(os.Environ(), asRank+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Equal(t, "overlap: -n 0: must be at least 1\n", stderr.String())
}

// Three ranks are refused with a clear error, not a hang.
func TestNotTwoRanks(t *testing.T) {
	t.Parallel()
	courier := exampletest.Courier(t)
	cmd := exec.Command(courier, "run", "-np", "3", "--", os.Args[0], "-n", "8", "-size", "4KiB")
	cmd.Env = append(os.Environ(), asRank+"=1", "COURIER_BACKEND=host", "COURIER_TIMEOUT=60s")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	assert.True(t, strings.Contains(string(out), "overlap: run with 2 ranks (courier run -np 2), not 3"), "%s", out)
}
