package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/exampletest"
)

// asRank in the environment makes the test binary the jacobi program, as
// each rank of a job that courier run starts.
const asRank = "JACOBI_TEST_AS_RANK"

func TestMain(m *testing.M) { exampletest.Main(m, asRank, main) }

// The small problem the test runs: 7 does not divide 30, so the blocks
// differ in size on 4 and 6 ranks.
const testN, testIters, testEvery = 30, 70, 7

// TestResidualsSameOnAnyRanks runs the program under courier run on 1, 2,
// 4 and 6 ranks of the host backend and on 4 and 6 of tcp, and checks
// that rank 0 prints the same residuals, to the last bit, as a plain
// serial Jacobi solver written here, and that they fall.
func TestResidualsSameOnAnyRanks(t *testing.T) {
	courier := exampletest.Courier(t)

	want := serialResiduals(testN, testIters, testEvery)
	require.Len(t, want, testIters/testEvery)
	for i := 1; i < len(want); i++ {
		require.Less(t, want[i], want[i-1], "the serial residuals fall")
	}
	for _, c := range []struct {
		backend string
		np      int
	}{{"host", 1}, {"host", 2}, {"host", 4}, {"host", 6}, {"tcp", 4}, {"tcp", 6}} {
		t.Run(fmt.Sprintf("%s-%d", c.backend, c.np), func(t *testing.T) {
			cmd := exec.Command(courier, "run", "-np", strconv.Itoa(c.np), "--", os.Args[0],
				"-n", strconv.Itoa(testN), "-iters", strconv.Itoa(testIters), "-every", strconv.Itoa(testEvery), "-bits")
			cmd.Env = append(os.Environ(), asRank+"=1", "COURIER_BACKEND="+c.backend, "COURIER_TIMEOUT=60s")
			out, err := cmd.Output()
			require.NoError(t, err, "stdout:\n%s", out)
			assert.Contains(t, string(out), fmt.Sprintf("[0] jacobi: 30×30 grid on %d ranks", c.np))
			got := printedResiduals(t, string(out))
			require.Len(t, got, len(want), "residual lines in:\n%s", out)
			for i := range want {
				assert.Equal(t, math.Float64bits(want[i]), math.Float64bits(got[i]),
					"residual %d: printed %v, serial %v", i, got[i], want[i])
			}
		})
	}
}

// printedResiduals returns the exact residuals (the hexadecimal field) of
// rank 0's "sweep" lines, in order, and checks each one's decimal form.
func printedResiduals(t *testing.T, out string) []float64 {
	var rs []float64
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) != 6 || f[0] != "[0]" || f[1] != "sweep" {
			continue
		}
		r, err := strconv.ParseFloat(f[5], 64)
		require.NoError(t, err, line)
		require.Equal(t, fmt.Sprintf("%.6e", r), f[4], line)
		rs = append(rs, r)
	}
	return rs
}

// serialResiduals is the textbook solver on one grid of (n+2)² points,
// boundary included: the top row is 1, the rest starts at 0. Every every
// sweeps (and after the last) it returns the root of the sum of squared
// change, added up row by row, each row left to right.
func serialResiduals(n, iters, every int) []float64 {
	s := n + 2
	u, v := make([]float64, s*s), make([]float64, s*s)
	for j := 1; j <= n; j++ {
		u[j], v[j] = 1, 1
	}
	var rs []float64
	for it := 1; it <= iters; it++ {
		for i := 1; i <= n; i++ {
			for j := 1; j <= n; j++ {
				k := i*s + j
				v[k] = 0.25 * (u[k-s] + u[k+s] + u[k-1] + u[k+1])
			}
		}
		if it%every == 0 || it == iters {
			var total float64
			for i := 1; i <= n; i++ {
				var row float64
				for j := 1; j <= n; j++ {
					d := v[i*s+j] - u[i*s+j]
					row += d * d
				}
				total += row
			}
			rs = append(rs, math.Sqrt(total))
		}
		u, v = v, u
	}
	return rs
}

func TestGrid(t *testing.T) {
	for size, want := range map[int][2]int{1: {1, 1}, 2: {1, 2}, 4: {2, 2}, 6: {2, 3}, 7: {1, 7}, 12: {3, 4}, 16: {4, 4}} {
		px, py := grid(size)
		assert.Equal(t, want, [2]int{px, py}, "grid(%d)", size)
	}
}

func TestSpan(t *testing.T) {
	// 30 points over 4 parts: 8, 8, 7, 7, covering [0, 30) without a gap.
	next := 0
	for k, w := range []int{8, 8, 7, 7} {
		lo, hi := span(30, 4, k)
		assert.Equal(t, next, lo)
		assert.Equal(t, w, hi-lo)
		next = hi
	}
	assert.Equal(t, 30, next)
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-n", "0"}, {"-iters", "-1"}, {"-every", "0"}, {"-nope"}} {
		_, err := parse(args)
		assert.Error(t, err, "%q", args)
	}
}
