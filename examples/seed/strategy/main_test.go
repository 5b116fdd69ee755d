package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/examples/seed/internal/work"
	"github.com/courier-mp/courier/internal/exampletest"
)

// asRank in the environment makes the test binary the strategy program.
const asRank = "STRATEGY_TEST_AS_RANK"

func TestMain(m *testing.M) { exampletest.Main(m, asRank, main) }

// The test's range, a second or so: 4 KiB, 16 KiB, 64 KiB, 256 KiB.
var (
	testFlags   = []string{"-min", "4KiB", "-max", "256KiB", "-density", "2", "-reps", "2"}
	testSizes   = []int64{4 << 10, 16 << 10, 64 << 10, 256 << 10}
	testDensity = 2.0
)

// A row of the table, as the program prints it.
var rowRE = regexp.MustCompile(`(?m)^\[1\] +(\d+ (?:B|KiB|MiB|GiB)) +(\d+)×(\d+) +([0-9.]+ (?:µs|ms|s)) +([0-9.]+ (?:µs|ms|s)) +([0-9]+\.[0-9]{2}) +(sync|depends|async) +(overlap|blocking|even) +([0-9a-f]{8})$`)

// The program under courier run on the host backend and on TCP: a row
// for every size, in order, whose matmul has the density asked for, whose
// times are positive and make the ratio printed, whose columns say what
// the guide and the measurement choose, and whose checksum is that of the
// message rank 0 filled in; and the line naming the crossover the rows
// show, beside the guide's rule. With -device, the same rows where there
// is a GPU, else the line that says it was skipped (a failure where
// COURIER_REQUIRE_GPU asks for a GPU).
func TestStrategyUnderCourierRun(t *testing.T) {
	t.Parallel()
	courier := exampletest.Courier(t)
	for _, c := range []struct {
		backend string
		device  bool
	}{{"host", false}, {"tcp", false}, {"tcp", true}} {
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
			if c.device && gpuSkipped(t, out) {
				return
			}
			memory := "host memory"
			if c.device {
				memory = "device memory (cuda:"
			}
			assert.Contains(t, out, "[1] strategy: rank 0 sends to rank 1, "+memory)
			checkTable(t, out)
		})
	}
}

// With -device on the fake GPU of backend/nccl's tests, so that the GPU
// code runs where there is no GPU: on tcp (device memory staged through
// the host) and on nccl (two ranks on the fake's GPU 0, through the CUDA
// IPC path). The fake runs sgemm in C, so this checks the program around
// the PTX.
func TestStrategyOnFakeGPU(t *testing.T) {
	t.Parallel()
	courier := exampletest.Courier(t)
	fake := exampletest.FakeGPU(t)
	for _, backend := range []string{"tcp", "nccl"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"run", "-np", "2", "--", os.Args[0], "-device"}, testFlags...)
			cmd := exec.Command(courier, args...)
			cmd.Env = append(append(os.Environ(), fake...), asRank+"=1", "COURIER_BACKEND="+backend, "COURIER_DEVICE=0", "COURIER_TIMEOUT=60s")
			stdout, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", stdout)
			out := string(stdout)
			assert.Contains(t, out, "[1] strategy: rank 0 sends to rank 1, device memory (cuda:0, Fake GPU 0); the compute: 2 FLOP per byte sent, a PTX sgemm kernel on a compute stream")
			checkTable(t, out)
		})
	}
}

// checkTable checks the table's rows and the crossover line.
func checkTable(t *testing.T, out string) {
	t.Helper()
	rows := rowRE.FindAllStringSubmatch(out, -1)
	require.Len(t, rows, len(testSizes), "rows in:\n%s", out)
	var verdicts []string
	for i, r := range rows {
		size := testSizes[i]
		assert.Equal(t, work.Bytes(size).String(), r[1], "row %d's size", i)
		n, _ := strconv.Atoi(r[2])
		// 2n³ is the density's share of the size, to the nearest order.
		flops := testDensity * float64(size)
		assert.True(t, 2*math.Pow(float64(n)-0.5, 3) <= flops && flops <= 2*math.Pow(float64(n)+0.5, 3), "%s: a %d×%d matmul for %g FLOP", r[1], n, n, flops)
		blocking, eb := parseDuration(t, r[4])
		overlapped, eo := parseDuration(t, r[5])
		assert.Positive(t, blocking, r[0])
		assert.Positive(t, overlapped, r[0])
		ratio, _ := strconv.ParseFloat(r[6], 64)
		if overlapped > eo {
			// The ratio of the times printed, within their rounding and
			// the ratio's own.
			want := blocking / overlapped
			slack := 0.0051 + want*(eb/blocking+eo/(overlapped-eo))
			assert.InDelta(t, want, ratio, slack, "%s: the ratio of the times printed", r[1])
		}

		guide := "depends"
		if size < 1_000_000 {
			guide = "sync"
		} else if size > 100_000_000 {
			guide = "async"
		}
		assert.Equal(t, guide, r[7], "%s: the guide's choice", r[1])
		// The verdict, where the ratio printed is not too near the margin
		// (1.05, and 1/1.05) for its rounding to decide.
		switch {
		case ratio >= 1.06:
			assert.Equal(t, "overlap", r[8], r[0])
		case ratio <= 0.94:
			assert.Equal(t, "blocking", r[8], r[0])
		case ratio >= 0.96 && ratio <= 1.04:
			assert.Equal(t, "even", r[8], r[0])
		}
		verdicts = append(verdicts, r[8])

		msg := make([]float32, size/4)
		work.Fill(msg, int(size%7)) // rank 0's message of this size
		assert.Equal(t, fmt.Sprintf("%08x", work.Checksum(msg)), r[9], "%s: the checksum", r[1])
	}

	// The crossover: the first row from which every verdict is overlap.
	first := len(verdicts)
	for first > 0 && verdicts[first-1] == "overlap" {
		first--
	}
	want := "overlap pays at no size here"
	if first < len(verdicts) {
		want = "overlap pays from " + work.Bytes(testSizes[first]).String() + " up"
	}
	assert.Regexp(t, `(?m)^\[1\] `+regexp.QuoteMeta(want)+`.*; the guide's rule of thumb: sync under 1 MB, depends on compute density from 1 to 100 MB, async over 100 MB$`, out)
}

// parseDuration reads a time the table prints, in seconds, and how far
// its rounding may be from the time measured (half its last digit).
func parseDuration(t *testing.T, s string) (secs, rounding float64) {
	t.Helper()
	num, unit, _ := strings.Cut(s, " ")
	v, err := strconv.ParseFloat(num, 64)
	require.NoError(t, err, "%q", s)
	scale := map[string]float64{"µs": 1e-6, "ms": 1e-3, "s": 1}[unit]
	digits := 0
	if _, frac, ok := strings.Cut(num, "."); ok {
		digits = len(frac)
	}
	return v * scale, 0.5 * math.Pow(10, -float64(digits)) * scale
}

// gpuSkipped reports whether the program said that it skipped the GPU,
// which fails t where COURIER_REQUIRE_GPU asks for a GPU (1 or more).
func gpuSkipped(t *testing.T, out string) bool {
	t.Helper()
	line := regexp.MustCompile(`\[1\] strategy -device: skipped, no GPU here \(.*\)`).FindString(out)
	if line == "" {
		return false
	}
	if v := os.Getenv("COURIER_REQUIRE_GPU"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("COURIER_REQUIRE_GPU=%q: want the number of GPUs required (1 for one)", v)
		}
		if n >= 1 {
			t.Fatalf("COURIER_REQUIRE_GPU=%d, but the GPU run was skipped: %s", n, line)
		}
	}
	t.Log("the GPU run was skipped:", line)
	return true
}

// The crossover line for each shape of verdicts.
func TestCrossover(t *testing.T) {
	ms := time.Millisecond
	mk := func(ratios ...float64) []row {
		var rows []row
		for i, r := range ratios {
			rows = append(rows, row{bytes: 4 << (10 + 2*i), blocking: time.Duration(r * float64(ms)), overlapped: ms})
		}
		return rows
	}
	for _, c := range []struct {
		rows []row
		want string
	}{
		{mk(0.9, 1.0, 1.2, 1.3), "overlap pays from 64 KiB up: blocking/overlapped at least 1.05 at every size from there to 256 KiB"},
		{mk(1.2, 1.3), "overlap pays from 4 KiB up (the smallest size measured): blocking/overlapped at least 1.05 at every size to 16 KiB"},
		{mk(1.2, 0.9, 1.1), "overlap pays from 64 KiB up (only the largest size measured): blocking/overlapped at least 1.05 there"},
		{mk(1.2, 1.3, 1.02), "overlap pays at no size here: blocking/overlapped is under 1.05 at the largest, 64 KiB (overlap won at 4 KiB, 16 KiB, but not at every size above)"},
		{mk(1.0, 0.5), "overlap pays at no size here: blocking/overlapped is under 1.05 at the largest, 16 KiB"},
		{nil, "no size measured"},
	} {
		assert.Equal(t, c.want, crossover(c.rows, 0.05))
	}
	assert.Equal(t, "even", row{blocking: 104, overlapped: 100}.verdict(0.05))
	assert.Equal(t, "blocking", row{blocking: 90, overlapped: 100}.verdict(0.05))
}

func TestSizesAndOrder(t *testing.T) {
	assert.Equal(t, []int64{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}, sizes(4<<10, 1<<20))
	assert.Equal(t, []int64{4 << 10, 16 << 10}, sizes(4<<10, 60<<10))
	assert.Equal(t, []int64{12}, sizes(12, 12))
	assert.Len(t, sizes(4<<10, 1<<30), 10)
	assert.Equal(t, 1, order(1, 1))
	assert.Equal(t, 128, order(1, 4<<20)) // 2·128³ = 4 Mi
	assert.Equal(t, 1024, iterations(4<<10))
	assert.Equal(t, 1, iterations(1<<30))
	assert.Equal(t, "sync", guide(999_999))
	assert.Equal(t, "depends", guide(1<<20))
	assert.Equal(t, "async", guide(128<<20))
	assert.Equal(t, "12.5 µs", duration(12500*time.Nanosecond))
	assert.Equal(t, "3.25 ms", duration(3250*time.Microsecond))
	assert.Equal(t, "1.500 s", duration(1500*time.Millisecond))
}

// Bad command lines fail at once, before the ranks meet, with exit status
// 2 and a line naming the flag.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-min", "1GiB", "-max", "4KiB"}, "-max 4 KiB is below -min 1 GiB"},
		{[]string{"-min", "6"}, "-min 6 B: must be a multiple of 4 bytes"},
		{[]string{"-min", "0"}, "-min 0 B: must be a multiple of 4 bytes"},
		{[]string{"-max", "lots"}, `size "lots": want a whole number of bytes`},
		{[]string{"-density", "0"}, "-density 0: must be a positive number"},
		{[]string{"-density", "NaN"}, "-density NaN: must be a positive number"},
		{[]string{"-density", "1e12"}, "larger than 65535×65535"},
		{[]string{"-margin", "-0.1"}, "-margin -0.1: must be 0 or more"},
		{[]string{"-reps", "0"}, "-reps 0: must be at least 1"},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, err := parse(c.args, io.Discard)
		if assert.Error(t, err, "%q", c.args) {
			assert.Contains(t, err.Error(), c.want, "%q", c.args)
		}
	}
	cfg, err := parse(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, work.Bytes(hostMax), cfg.max, "the host's default")
	cfg, err = parse([]string{"-device"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, work.Bytes(deviceMax), cfg.max, "-device's default")

	cmd := exec.Command(os.Args[0], "-min", "1GiB", "-max", "4KiB")
	cmd.Env = append(os.Environ(), asRank+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Equal(t, "strategy: -max 4 KiB is below -min 1 GiB\n", stderr.String())
}
