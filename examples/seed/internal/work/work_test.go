package work

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/exampletest"
)

// naive is c = a×b by the textbook triple loop, in float64.
func naive(a, b []float32, n int) []float64 {
	c := make([]float64, n*n)
	for i := range n {
		for j := range n {
			var s float64
			for k := range n {
				s += float64(a[i*n+k]) * float64(b[k*n+j])
			}
			c[i*n+j] = s
		}
	}
	return c
}

// Multiply gives the textbook product, exactly on Fill's inputs (every
// worker count, orders that no worker count divides, and n = 1), and to
// float32's precision on random ones.
func TestMultiply(t *testing.T) {
	for _, n := range []int{1, 2, 7, 33} {
		for _, workers := range []int{0, 1, 3, 64} {
			a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
			Fill(a, 1)
			Fill(b, 2)
			require.NoError(t, Multiply(c, a, b, n, workers))
			want := naive(a, b, n)
			for i := range c {
				require.Equal(t, want[i], float64(c[i]), "n %d, workers %d, element %d", n, workers, i)
			}
		}
	}
	const n = 50
	r := rand.New(rand.NewPCG(1, 2))
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = r.Float32()*2-1, r.Float32()*2-1
	}
	require.NoError(t, Multiply(c, a, b, n, 4))
	for i, w := range naive(a, b, n) {
		assert.InDelta(t, w, c[i], 1e-4, "element %d", i)
	}
}

// Fill's products are integers of magnitude up to 9n, and not all zero:
// a check against them can fail.
func TestFillExact(t *testing.T) {
	const n = 64
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	Fill(a, 1)
	Fill(b, 2)
	require.NoError(t, Multiply(c, a, b, n, 2))
	nonzero := 0
	for _, v := range c {
		require.Equal(t, float32(int(v)), v)
		require.LessOrEqual(t, v*v, float32(9*n*9*n))
		if v != 0 {
			nonzero++
		}
	}
	assert.Greater(t, nonzero, n*n/2)
	Fill(a, 3)
	assert.NotEqual(t, Checksum(a), Checksum(b), "another seed, another pattern")
}

// Check passes a right product and names the element of a wrong one.
func TestCheck(t *testing.T) {
	const n = 20
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	Fill(a, 1)
	Fill(b, 2)
	require.NoError(t, Multiply(c, a, b, n, 2))
	rows, err := Check(c, a, b, n, 5)
	require.NoError(t, err)
	assert.Equal(t, 5, rows)
	rows, err = Check(c, a, b, n, 100)
	require.NoError(t, err)
	assert.Equal(t, n, rows, "at most every row")

	c[n*n-1]++ // the last row is always among those checked
	_, err = Check(c, a, b, n, 2)
	assert.ErrorContains(t, err, "element (19, 19) of the 20×20 product")
	_, err = Check(c[:n], a, b, n, 2)
	assert.ErrorContains(t, err, "matrix c holds 20 elements, fewer than 20×20")
	assert.Error(t, Multiply(c, a, b, 0, 1))
}

func TestBytes(t *testing.T) {
	for in, want := range map[string]Bytes{
		"0": 0, "4096": 4096, "4KiB": 4 << 10, "4 KiB": 4 << 10, "64MiB": 64 << 20, "1GiB": 1 << 30,
		"1G": 1 << 30, "3K": 3 << 10, "12B": 12, " 2M ": 2 << 20,
	} {
		got, err := ParseBytes(in)
		require.NoError(t, err, "%q", in)
		assert.Equal(t, want, got, "%q", in)
	}
	for _, in := range []string{"", "KiB", "-1", "1.5MiB", "4MB", "4 kib", "x", "9000000000GiB"} {
		_, err := ParseBytes(in)
		assert.Error(t, err, "%q", in)
	}
	for b, want := range map[Bytes]string{0: "0 B", 4096: "4 KiB", 1 << 30: "1 GiB", 1536 << 10: "1536 KiB", 1000: "1000 B"} {
		assert.Equal(t, want, b.String())
	}
	var b Bytes
	require.NoError(t, b.Set("256MiB"))
	assert.Equal(t, Bytes(256<<20), b)
	assert.Error(t, b.Set("lots"))
}

// The arguments Multiply launches the kernel with are, one for one, of
// the types cuda.Function.Launch maps to the .param list of PTX's entry.
func TestLaunchArgsMatchPTX(t *testing.T) {
	entry := regexp.MustCompile(`\.entry ` + kernelName + `\(([^)]*)\)`).FindStringSubmatch(PTX)
	require.NotNil(t, entry, "the PTX has no .entry %s", kernelName)
	params := regexp.MustCompile(`\.param \.(\w+) (\w+)`).FindAllStringSubmatch(entry[1], -1)
	args := launchArgs(cuda.Slice[float32]{}, cuda.Slice[float32]{}, cuda.Slice[float32]{}, 5)
	require.Len(t, params, len(args))
	ptxType := map[reflect.Type]string{
		reflect.TypeFor[cuda.Slice[float32]](): "u64",
		reflect.TypeFor[uint32]():              "u32",
	}
	for i, a := range args {
		assert.Equal(t, ptxType[reflect.TypeOf(a)], params[i][1], "parameter %d (%s) gets a %T", i, params[i][2], a)
	}
	assert.Equal(t, uint32(5), args[3])
}

// requireGPU skips t without a GPU, and fails it instead when
// COURIER_REQUIRE_GPU asks for one (the GPU machine sets it), or when
// CUDA is there but broken.
func requireGPU(t *testing.T) cuda.Device {
	t.Helper()
	required := 0
	if v := os.Getenv("COURIER_REQUIRE_GPU"); v != "" {
		var err error
		if required, err = strconv.Atoi(v); err != nil || required < 0 {
			t.Fatalf("COURIER_REQUIRE_GPU=%q: want the number of GPUs required (1 for one)", v)
		}
	}
	n, err := cuda.DeviceCount()
	if err != nil && !errors.Is(err, cuda.ErrNotSupported) {
		t.Fatalf("CUDA is present but fails: %v", err)
	}
	if err == nil && n > 0 {
		return 0
	}
	if required >= 1 {
		t.Fatalf("COURIER_REQUIRE_GPU=%d, but there is no GPU here (%d devices, %v)", required, n, err)
	}
	t.Skipf("needs a GPU (%d devices, %v)", n, err)
	return 0
}

// TestKernelGPU in a process of its own whose GPU is the fake one of
// backend/nccl's tests, which runs sgemm in C over the elements the grid
// covers and takes its parameters in the PTX's order: the launch, its
// grid and its arguments, checked where there is no GPU.
func TestKernelFakeGPU(t *testing.T) {
	if os.Getenv(fakeChild) == "1" {
		t.Skip("this process is the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKernelGPU$", "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), exampletest.FakeGPU(t)...), fakeChild+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "--- PASS: TestKernelGPU", "%s", out)
}

// fakeChild marks the process TestKernelFakeGPU starts.
const fakeChild = "WORK_TEST_FAKE_GPU"

// The kernel on a GPU (a real one, or the fake in TestKernelFakeGPU's
// child): the product, exact, for orders that are and are not multiples
// of the block's side, and n = 1; a slice too short is refused before
// launch.
func TestKernelGPU(t *testing.T) {
	d := requireGPU(t)
	k, err := LoadKernel(d)
	require.NoError(t, err)
	defer func() { require.NoError(t, k.Unload()) }()
	s, err := cuda.NewStream(d)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Destroy()) }()
	for _, n := range []int{1, 16, 37, 300} {
		a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
		Fill(a, 1)
		Fill(b, 2)
		da, err := cuda.Alloc[float32](d, int64(n*n))
		require.NoError(t, err)
		db, err := cuda.Alloc[float32](d, int64(n*n))
		require.NoError(t, err)
		dc, err := cuda.Alloc[float32](d, int64(n*n))
		require.NoError(t, err)
		require.NoError(t, cuda.CopyToDevice(da, a))
		require.NoError(t, cuda.CopyToDevice(db, b))
		require.NoError(t, cuda.Memset(dc, 0xff)) // NaNs: an element left unwritten fails
		require.NoError(t, k.Multiply(dc, da, db, n, s))
		require.NoError(t, s.Synchronize())
		require.NoError(t, cuda.CopyToHost(c, dc))
		rows, err := Check(c, a, b, n, n)
		require.NoError(t, err, "n %d", n)
		assert.Equal(t, n, rows)
		assert.Error(t, k.Multiply(dc, da, db, n+1, s), "n %d: too short", n)
		for _, m := range []cuda.Slice[float32]{da, db, dc} {
			require.NoError(t, m.Free())
		}
	}
}
