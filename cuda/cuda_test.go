package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Three kinds of tests live here:
//
//   - tests that need no driver (argument checks, the loader's errors, the
//     error type), which run everywhere, with cgo on or off;
//   - driver tests, run by eachDriver twice: as subtest "gpu" against the
//     real driver (skipped without a GPU, see requireGPUs) and as subtest
//     "fake" against testdata/fakecuda.c (skipped without cgo or a C
//     compiler);
//   - a few fake-only tests of behaviour a real GPU cannot show on demand.
//
// On the GPU machine: COURIER_REQUIRE_GPU=2 ./cuda.test -test.v (see
// scripts/gpu-build.sh).

// childEnv marks a child process of this test binary: "1" for
// TestInitEnvChild, "ipc:" and a handle for TestIPC's other process.
const childEnv = "COURIER_CUDA_TEST_CHILD"

func TestMain(m *testing.M) {
	if h, ok := strings.CutPrefix(os.Getenv(childEnv), ipcChildPrefix); ok {
		os.Exit(ipcChild(h)) // TestIPC's other process
	}
	code := m.Run()
	removeFakes()
	os.Exit(code)
}

// requireGPUs skips t unless the real driver works here with at least n
// devices. It cannot lie on a GPU machine:
//
//   - with COURIER_REQUIRE_GPU=N (a number of GPUs; 1 for "a GPU"), a test
//     that needs n <= N GPUs fails instead of skipping;
//   - a driver that loads but fails otherwise than with ErrNotSupported
//     fails the test: a broken CUDA is not a missing one;
//   - calling it while a fake driver is in place fails the test.
func requireGPUs(t *testing.T, n int) {
	t.Helper()
	if fakeActive {
		t.Fatal("requireGPUs called while the fake driver is in place")
	}
	required := 0
	if v := os.Getenv("COURIER_REQUIRE_GPU"); v != "" {
		var err error
		if required, err = strconv.Atoi(v); err != nil || required < 0 {
			t.Fatalf("COURIER_REQUIRE_GPU=%q: want the number of GPUs required (1 for one)", v)
		}
	}
	have, err := DeviceCount()
	if err != nil && !errors.Is(err, ErrNotSupported) {
		t.Fatalf("CUDA is present but fails: %v", err)
	}
	if err == nil && have >= n {
		l, _ := getLib()
		dev, host := l.mem.live()
		t.Cleanup(func() {
			if d, h := l.mem.live(); d != dev || h != host {
				t.Errorf("leaked %d device and %d page-locked allocations", d-dev, h-host)
			}
		})
		return
	}
	reason := fmt.Sprintf("%d device(s)", have)
	if err != nil {
		reason = err.Error()
	}
	if required >= n {
		t.Fatalf("COURIER_REQUIRE_GPU=%d, but a test that needs %d GPU(s) found %s", required, n, reason)
	}
	t.Skipf("needs %d GPU(s): %s", n, reason)
}

// eachDriver runs body against the real driver with at least gpus devices
// (subtest "gpu") and against the fake driver, which has two (subtest
// "fake").
func eachDriver(t *testing.T, gpus int, body func(t *testing.T)) {
	t.Run("gpu", func(t *testing.T) {
		requireGPUs(t, gpus)
		body(t)
	})
	t.Run("fake", func(t *testing.T) {
		useFake(t)
		body(t)
	})
}

// noErr fails t at once on an error.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantIs fails t unless err matches target.
func wantIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want one matching %q", err, target)
	}
}

// waitDone polls q until it reports done, for at most 10 s.
func waitDone(t *testing.T, q func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		done, err := q()
		noErr(t, err)
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("not done after 10s")
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// ---- Tests that need no driver ----

func TestLoadMissingLibrary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-libcuda.so.1")
	d, err := load(path)
	if d != nil {
		t.Fatal("load returned a driver for a missing file")
	}
	wantIs(t, err, ErrNotSupported)
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not name %s", err, path)
	}
}

func TestLoadNotALibrary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libcuda.so.1")
	noErr(t, os.WriteFile(path, []byte("not an ELF file\n"), 0o644))
	_, err := load(path)
	wantIs(t, err, ErrNotSupported)
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not name %s", err, path)
	}
}

// TestInitFromEnvMissingLibrary runs the test binary again with
// COURIER_CUDA_LIBRARY naming a missing file, so Init's process-wide cache
// starts empty there.
func TestInitFromEnvMissingLibrary(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		t.Skip("already in the child")
	}
	path := filepath.Join(t.TempDir(), "missing", "libcuda.so.1")
	cmd := exec.Command(os.Args[0], "-test.run=^TestInitEnvChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1", LibraryEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestInitEnvChild") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestInitEnvChild is the child of TestInitFromEnvMissingLibrary.
func TestInitEnvChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("runs only as the child of TestInitFromEnvMissingLibrary")
	}
	path := os.Getenv(LibraryEnv)
	err := Init()
	wantIs(t, err, ErrNotSupported)
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("Init: %q does not name %s", err, path)
	}
	if err2 := Init(); err2 != err {
		t.Fatalf("Init is not cached: %v, then %v", err, err2)
	}
	_, err = DeviceCount()
	wantIs(t, err, ErrNotSupported)
	_, err = Alloc[float32](0, 16)
	wantIs(t, err, ErrNotSupported)
	_, err = NewStream(0)
	wantIs(t, err, ErrNotSupported)
}

// brokenDriver puts a missing driver in place for t.
func brokenDriver(t *testing.T) error {
	_, err := load(filepath.Join(t.TempDir(), "libcuda.so.1"))
	if err == nil {
		t.Fatal("loaded a missing library")
	}
	useLib(t, nil, err)
	return err
}

// TestNoDriver checks that every entry point reports ErrNotSupported when
// the driver is missing, whether or not this machine has one.
func TestNoDriver(t *testing.T) {
	brokenDriver(t)
	fake := Slice[float32]{ptr: 0x10000, n: 4}
	host := make([]float32, 4)
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	add(Init())
	_, err := DriverVersion()
	add(err)
	_, err = DeviceCount()
	add(err)
	_, err = Symbol("cuInit")
	add(err)
	d := Device(0)
	_, err = d.Name()
	add(err)
	_, err = d.TotalMemory()
	add(err)
	_, err = d.PCIBusID()
	add(err)
	_, _, err = d.ComputeCapability()
	add(err)
	_, err = d.PrimaryContext()
	add(err)
	add(d.Synchronize())
	_, err = Alloc[float32](0, 10)
	add(err)
	_, err = Alloc[float32](0, 0)
	add(err)
	_, err = HostAlloc[int64](10)
	add(err)
	_, err = HostAlloc[int64](0)
	add(err)
	_, err = NewStream(0)
	add(err)
	_, err = NewEvent(0)
	add(err)
	_, err = NewEventNoTiming(0)
	add(err)
	_, err = LoadPTX(0, testPTX)
	add(err)
	add(CopyToDevice(fake, host))
	add(CopyToHost(host, fake))
	add(CopyDevice(fake, fake))
	add(Memset(fake, 0))
	add(fake.Free())
	add(Pinned[float32]{s: host}.Free())
	for i, err := range errs {
		if !errors.Is(err, ErrNotSupported) {
			t.Errorf("call %d: %v, want ErrNotSupported", i, err)
		}
	}
}

// TestArgumentValidation checks that bad arguments are reported before any
// driver call: with no driver at all, they are ErrInvalid, not
// ErrNotSupported.
func TestArgumentValidation(t *testing.T) {
	brokenDriver(t)
	s4 := Slice[float32]{ptr: 0x10000, n: 4}
	var s0 Slice[float32]
	three := make([]float32, 3)
	invalid := map[string]error{}
	check := func(name string, err error) { invalid[name] = err }

	_, err := Alloc[float32](0, -1)
	check("Alloc(-1)", err)
	_, err = Alloc[complex128](0, math.MaxInt64/8)
	check("Alloc(huge)", err)
	_, err = HostAlloc[float32](-1)
	check("HostAlloc(-1)", err)
	_, err = HostAlloc[uint64](math.MaxInt64)
	check("HostAlloc(huge)", err)
	check("CopyToDevice", CopyToDevice(s4, three))
	check("CopyToHost", CopyToHost(three, s4))
	check("CopyDevice", CopyDevice(s4, s0))
	check("CopyToDeviceAsync length", CopyToDeviceAsync(s4, three, nil))
	check("CopyToDeviceAsync nil stream", CopyToDeviceAsync(s0, nil, nil))
	check("CopyToHostAsync length", CopyToHostAsync(three, s4, nil))
	check("CopyToHostAsync nil stream", CopyToHostAsync(nil, s0, nil))
	check("CopyDeviceAsync length", CopyDeviceAsync(s4, s0, nil))
	check("CopyDeviceAsync nil stream", CopyDeviceAsync(s0, s0, nil))
	check("MemsetAsync nil stream", MemsetAsync(s4, 0, nil))
	_, err = s4.Sub(-1, 2)
	check("Sub(-1,2)", err)
	_, err = s4.Sub(3, 2)
	check("Sub(3,2)", err)
	_, err = s4.Sub(0, 5)
	check("Sub(0,5)", err)
	_, err = LoadPTX(0, " \n")
	check("LoadPTX empty", err)
	_, err = LoadPTX(0, ".version 7.0\x00")
	check("LoadPTX NUL", err)
	var s *Stream
	check("nil Stream.Synchronize", s.Synchronize())
	_, err = s.Query()
	check("nil Stream.Query", err)
	check("nil Stream.WaitEvent", s.WaitEvent(nil))
	var e *Event
	check("nil Event.Record", e.Record(nil))
	_, err = e.Query()
	check("nil Event.Query", err)
	check("nil Event.Synchronize", e.Synchronize())
	_, err = Elapsed(nil, nil)
	check("Elapsed(nil, nil)", err)
	var m *Module
	_, err = m.Function("f")
	check("nil Module.Function", err)
	var f *Function
	check("Launch zero grid", f.Launch([3]uint32{0, 1, 1}, [3]uint32{1, 1, 1}, 0, nil))
	check("Launch zero block", f.Launch([3]uint32{1, 1, 1}, [3]uint32{32, 0, 1}, 0, nil))
	check("Launch bad arg", f.Launch([3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, s4, 3))
	check("Launch nil function", f.Launch([3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, s4))
	for name, err := range invalid {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}

	// What is valid needs no driver either.
	for name, err := range map[string]error{
		"CopyToDevice empty": CopyToDevice(s0, nil),
		"CopyToHost empty":   CopyToHost([]float32{}, s0),
		"CopyDevice empty":   CopyDevice(s0, s0),
		"Memset empty":       Memset(s0, 7),
		"Free empty":         s0.Free(),
		"Pinned.Free empty":  Pinned[float32]{}.Free(),
		"nil Stream.Destroy": s.Destroy(),
		"nil Event.Destroy":  e.Destroy(),
		"nil Module.Unload":  m.Unload(),
	} {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if s.Handle() != 0 || e.Handle() != 0 || f.Handle() != 0 {
		t.Error("nil handles are not 0")
	}
}

func TestLaunchArgs(t *testing.T) {
	sl := Slice[float64]{ptr: 0xdead0000, n: 1}
	slots, err := marshalArgs("test", []any{
		uintptr(0x1234), sl, int32(-2), uint32(7), int64(-3), uint64(1 << 40), float32(1.5), float64(-0.25),
	})
	noErr(t, err)
	want := []uint64{
		0x1234, 0xdead0000, 0xfffffffe, 7, math.MaxUint64 - 2, 1 << 40,
		uint64(math.Float32bits(1.5)), math.Float64bits(-0.25),
	}
	if !slices.Equal(slots, want) {
		t.Fatalf("slots %#x, want %#x", slots, want)
	}
	if slots, err := marshalArgs("test", nil); err != nil || slots != nil {
		t.Fatalf("no args: %v, %v", slots, err)
	}
	for _, bad := range []struct {
		arg  any
		want string
	}{
		{int(1), "argument 1 has type int"},
		{uint(1), "argument 1 has type uint"},
		{"x", "argument 1 has type string"},
		{[]float32{1}, "argument 1 has type []float32"},
		{&sl, "argument 1 has type *cuda.Slice[float64]"},
		{(*Slice[float64])(nil), "not a pointer"},
		{nil, "argument 1 has type <nil>"},
		{int16(1), "argument 1 has type int16"},
	} {
		_, err := marshalArgs("test", []any{uintptr(0), bad.arg})
		wantIs(t, err, ErrInvalid)
		if !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%T: %q does not say %q", bad.arg, err, bad.want)
		}
	}
	_, err = marshalArgs("test", make([]any, maxLaunchArgs+1))
	wantIs(t, err, ErrInvalid)
}

func TestSub(t *testing.T) {
	s := Slice[int32]{ptr: 0x10000, n: 10, dev: 1}
	for _, c := range []struct{ from, to, ptr, n int64 }{
		{2, 5, 0x10008, 3}, {0, 10, 0x10000, 10}, {0, 0, 0x10000, 0}, {10, 10, 0x10028, 0},
	} {
		sub, err := s.Sub(c.from, c.to)
		noErr(t, err)
		if sub.Ptr() != uintptr(c.ptr) || sub.Len() != c.n || sub.Device() != 1 {
			t.Errorf("Sub(%d, %d) = %#x len %d dev %d", c.from, c.to, sub.Ptr(), sub.Len(), sub.Device())
		}
	}
	sub, _ := s.Sub(2, 8)
	subsub, err := sub.Sub(1, 3)
	noErr(t, err)
	if subsub.Ptr() != 0x1000c || subsub.Len() != 2 {
		t.Errorf("Sub of Sub = %#x len %d", subsub.Ptr(), subsub.Len())
	}
	var zero Slice[int32]
	if z, err := zero.Sub(0, 0); err != nil || z.Ptr() != 0 {
		t.Errorf("zero.Sub(0, 0) = %#x, %v", z.Ptr(), err)
	}
}

func TestMemTable(t *testing.T) {
	var m memTable
	m.addHost(0x3000, 0x100)
	m.addHost(0x1000, 0x1000)
	m.addHost(0x5000, 8)
	for _, c := range []struct {
		p     uintptr
		bytes int64
		want  bool
	}{
		{0x1000, 0x1000, true}, {0x1800, 0x800, true}, {0x1800, 0x801, false},
		{0x0fff, 2, false}, {0x2000, 1, false}, {0x30ff, 1, true}, {0x3100, 1, false},
		{0x5000, 8, true}, {0x5004, 4, true}, {0x5008, 1, false}, {0x4fff, 1, false},
	} {
		if got := m.pinned(c.p, c.bytes); got != c.want {
			t.Errorf("pinned(%#x, %d) = %v", c.p, c.bytes, got)
		}
	}
	if m.takeHost(0x1800, 0x800) || m.takeHost(0x1000, 0x800) {
		t.Error("took part of an allocation")
	}
	if !m.takeHost(0x3000, 0x100) || m.takeHost(0x3000, 0x100) {
		t.Error("take, take again")
	}
	if m.pinned(0x3000, 1) {
		t.Error("freed memory still pinned")
	}
	m.addDevice(0x7000, 64)
	take := func(n int64) bool { ok, _ := m.takeDevice(0x7000, n); return ok }
	if take(32) || !take(64) || take(64) {
		t.Error("device take")
	}
	if d, h := m.live(); d != 0 || h != 2 {
		t.Errorf("live = %d, %d", d, h)
	}
}

func TestErrorType(t *testing.T) {
	e := (&Error{Code: 100, Op: "cuInit"}).fill()
	if e.Error() != "cuda: cuInit: CUresult(100) (100): unknown error" {
		t.Errorf("Error() = %q", e.Error())
	}
	var err error = fmt.Errorf("wrapped: %w", &Error{Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Msg: "out of memory", Op: "cuMemAlloc"})
	if errors.Is(err, ErrNotSupported) {
		t.Error("out of memory matches ErrNotSupported")
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != 2 {
		t.Errorf("errors.As: %v", err)
	}
	if got := err.Error(); got != "wrapped: cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory" {
		t.Errorf("Error() = %q", got)
	}
	for _, code := range []int{34, 35, 100, 801, 803, 804} {
		if !errors.Is(&Error{Code: code}, ErrNotSupported) {
			t.Errorf("code %d does not match ErrNotSupported", code)
		}
	}
	withLog := &Error{Code: 218, Name: "CUDA_ERROR_INVALID_PTX", Msg: "bad", Op: "cuModuleLoadDataEx", Log: "line 3: oops"}
	if !strings.HasSuffix(withLog.Error(), "\nline 3: oops") {
		t.Errorf("Error() = %q", withLog.Error())
	}
}

// ---- Driver tests: real GPU and fake ----

func TestDevices(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		v, err := DriverVersion()
		noErr(t, err)
		if v < 1000 {
			t.Errorf("DriverVersion = %d", v)
		}
		n, err := DeviceCount()
		noErr(t, err)
		busID := regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]$`)
		seen := map[string]bool{}
		for d := range Device(n) {
			name, err := d.Name()
			noErr(t, err)
			mem, err := d.TotalMemory()
			noErr(t, err)
			bus, err := d.PCIBusID()
			noErr(t, err)
			major, minor, err := d.ComputeCapability()
			noErr(t, err)
			ctx, err := d.PrimaryContext()
			noErr(t, err)
			ctx2, err := d.PrimaryContext()
			noErr(t, err)
			t.Logf("%v: %s, %d MiB, %s, sm_%d%d, CUDA %d", d, name, mem>>20, bus, major, minor, v)
			if name == "" || mem <= 0 || !busID.MatchString(bus) || major < 1 || ctx == 0 || ctx != ctx2 || seen[bus] {
				t.Errorf("%v: name %q, memory %d, bus %q, capability %d.%d, context %#x then %#x", d, name, mem, bus, major, minor, ctx, ctx2)
			}
			seen[bus] = true
			noErr(t, d.Synchronize())
		}
		_, err = Device(n).Name()
		wantIs(t, err, ErrInvalid)
		_, err = Alloc[float32](Device(-1), 1)
		wantIs(t, err, ErrInvalid)
		if p, err := Symbol("cuInit"); err != nil || p == 0 {
			t.Errorf("Symbol(cuInit) = %#x, %v", p, err)
		}
		_, err = Symbol("cuNoSuchFunction")
		wantIs(t, err, ErrNotSupported)
	})
}

// roundTrip copies n generated elements to device d and back.
func roundTrip[T Elem](t *testing.T, d Device, n int64, gen func(i int64) T) {
	t.Run(fmt.Sprintf("%T/%d", *new(T), n), func(t *testing.T) {
		src := make([]T, n)
		for i := range src {
			src[i] = gen(int64(i))
		}
		s, err := Alloc[T](d, n)
		noErr(t, err)
		defer func() { noErr(t, s.Free()) }()
		if s.Len() != n || s.Device() != d || (n == 0) != (s.Ptr() == 0) {
			t.Fatalf("Alloc(%d): len %d, device %v, ptr %#x", n, s.Len(), s.Device(), s.Ptr())
		}
		noErr(t, CopyToDevice(s, src))
		dst := make([]T, n)
		noErr(t, CopyToHost(dst, s))
		if !slices.Equal(src, dst) {
			t.Fatal("data differs after the round trip")
		}
	})
}

func TestRoundTrip(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		n, err := DeviceCount()
		noErr(t, err)
		for _, size := range []int64{0, 1, 1<<20 + 3} {
			d := Device(size % int64(n))
			roundTrip(t, d, size, func(i int64) float32 { return float32(i) * 0.5 })
			roundTrip(t, d, size, func(i int64) float64 { return -float64(i) / 3 })
			roundTrip(t, d, size, func(i int64) int8 { return int8(i * 7) })
			roundTrip(t, d, size, func(i int64) uint16 { return uint16(i * 31) })
			roundTrip(t, d, size, func(i int64) int64 { return i * -0x1234567 })
			roundTrip(t, d, size, func(i int64) complex128 { return complex(float64(i), -float64(i)) })
			roundTrip(t, d, size, func(i int64) int { return int(i) - 5 })
		}
	})
}

func TestSubSlices(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		s, err := Alloc[int32](0, 100)
		noErr(t, err)
		defer func() { noErr(t, s.Free()) }()
		all := make([]int32, 100)
		for i := range all {
			all[i] = int32(i)
		}
		noErr(t, CopyToDevice(s, all))

		sub, err := s.Sub(10, 20)
		noErr(t, err)
		got := make([]int32, 10)
		noErr(t, CopyToHost(got, sub))
		if !slices.Equal(got, all[10:20]) {
			t.Fatalf("sub [10:20] = %v", got)
		}
		w, err := s.Sub(50, 60)
		noErr(t, err)
		w2, err := w.Sub(5, 10) // [55:60]
		noErr(t, err)
		noErr(t, CopyToDevice(w2, []int32{-1, -2, -3, -4, -5}))
		noErr(t, CopyToHost(all, s))
		for i, v := range all {
			want := int32(i)
			if i >= 55 && i < 60 {
				want = int32(54 - i)
			}
			if v != want {
				t.Fatalf("element %d = %d, want %d", i, v, want)
			}
		}
		// A sub-slice cannot free the allocation; the end of it is empty.
		wantIs(t, sub.Free(), ErrInvalid)
		end, err := s.Sub(100, 100)
		noErr(t, err)
		noErr(t, CopyToDevice(end, nil))

		double, err := Alloc[int32](0, 4)
		noErr(t, err)
		noErr(t, double.Free())
		wantIs(t, double.Free(), ErrInvalid)
	})
}

func TestMemset(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		b, err := Alloc[uint8](0, 1000)
		noErr(t, err)
		defer func() { noErr(t, b.Free()) }()
		noErr(t, Memset(b, 0xab))
		got := make([]uint8, 1000)
		noErr(t, CopyToHost(got, b))
		if slices.ContainsFunc(got, func(v uint8) bool { return v != 0xab }) {
			t.Fatal("Memset(0xab) on bytes")
		}
		w, err := Alloc[uint32](0, 257)
		noErr(t, err)
		defer func() { noErr(t, w.Free()) }()
		noErr(t, Memset(w, 0xab))
		words := make([]uint32, 257)
		noErr(t, CopyToHost(words, w))
		if slices.ContainsFunc(words, func(v uint32) bool { return v != 0xabababab }) {
			t.Fatal("Memset(0xab) on words")
		}
		s, err := NewStream(0)
		noErr(t, err)
		defer func() { noErr(t, s.Destroy()) }()
		tail, err := w.Sub(200, 257)
		noErr(t, err)
		noErr(t, MemsetAsync(tail, 0, s))
		noErr(t, s.Synchronize())
		noErr(t, CopyToHost(words, w))
		for i, v := range words {
			if want := uint32(0xabababab); i >= 200 && v != 0 || i < 200 && v != want {
				t.Fatalf("after MemsetAsync: word %d = %#x", i, v)
			}
		}
	})
}

func TestCopyDevice(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		copyDevice(t, 0, 0)
	})
}

func TestCopyDevicePeer(t *testing.T) {
	eachDriver(t, 2, func(t *testing.T) {
		copyDevice(t, 0, 1)
		copyDevice(t, 1, 0)
	})
}

// copyDevice copies from device from to device to, blocking and on a
// stream of either device.
func copyDevice(t *testing.T, from, to Device) {
	const n = 1<<20 + 3
	src, err := Alloc[float64](from, n)
	noErr(t, err)
	defer func() { noErr(t, src.Free()) }()
	dst, err := Alloc[float64](to, n)
	noErr(t, err)
	defer func() { noErr(t, dst.Free()) }()
	data := make([]float64, n)
	for i := range data {
		data[i] = float64(i) + 0.25
	}
	noErr(t, CopyToDevice(src, data))
	noErr(t, CopyDevice(dst, src))
	got := make([]float64, n)
	noErr(t, CopyToHost(got, dst))
	if !slices.Equal(got, data) {
		t.Fatalf("CopyDevice %v → %v: data differs", from, to)
	}
	wantIs(t, CopyDevice(dst, head(t, src, n-1)), ErrInvalid)

	for _, on := range []Device{from, to} {
		s, err := NewStream(on)
		noErr(t, err)
		noErr(t, Memset(dst, 0))
		noErr(t, CopyDeviceAsync(dst, src, s))
		noErr(t, s.Synchronize())
		noErr(t, CopyToHost(got, dst))
		if !slices.Equal(got, data) {
			t.Fatalf("CopyDeviceAsync %v → %v on a stream of %v: data differs", from, to, on)
		}
		noErr(t, s.Destroy())
	}
}

// head is s's first n elements.
func head[T Elem](t *testing.T, s Slice[T], n int64) Slice[T] {
	t.Helper()
	sub, err := s.Sub(0, n)
	noErr(t, err)
	return sub
}

func TestAsyncPinned(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		const n = 1<<20 + 3
		src, err := HostAlloc[float32](n)
		noErr(t, err)
		defer func() { noErr(t, src.Free()) }()
		dst, err := HostAlloc[float32](n)
		noErr(t, err)
		defer func() { noErr(t, dst.Free()) }()
		if src.Len() != n || len(src.Slice()) != n {
			t.Fatalf("HostAlloc(%d): %d elements", n, len(src.Slice()))
		}
		for i := range src.Slice() {
			src.Slice()[i] = float32(i) - 7
		}
		d, err := Alloc[float32](0, n)
		noErr(t, err)
		defer func() { noErr(t, d.Free()) }()
		s, err := NewStream(0)
		noErr(t, err)
		defer func() { noErr(t, s.Destroy()) }()
		if s.Handle() == 0 || s.Device() != 0 {
			t.Fatalf("stream handle %#x device %v", s.Handle(), s.Device())
		}
		e, err := NewEventNoTiming(0)
		noErr(t, err)
		defer func() { noErr(t, e.Destroy()) }()

		noErr(t, CopyToDeviceAsync(d, src.Slice(), s))
		noErr(t, CopyToHostAsync(dst.Slice(), d, s))
		noErr(t, e.Record(s))
		waitDone(t, e.Query)
		if !slices.Equal(src.Slice(), dst.Slice()) {
			t.Fatal("data differs after the event fired")
		}

		// Part of a pinned buffer is pinned too; Synchronize waits.
		clear(dst.Slice())
		noErr(t, CopyToHostAsync(dst.Slice()[:10], head(t, d, 10), s))
		noErr(t, s.Synchronize())
		if !slices.Equal(src.Slice()[:10], dst.Slice()[:10]) {
			t.Fatal("data differs after Synchronize")
		}
		waitDone(t, s.Query)

		var empty Pinned[float32]
		if empty, err = HostAlloc[float32](0); err != nil || empty.Slice() != nil {
			t.Fatalf("HostAlloc(0) = %v, %v", empty.Slice(), err)
		}
		noErr(t, empty.Free())
		twice, err := HostAlloc[byte](3)
		noErr(t, err)
		noErr(t, twice.Free())
		wantIs(t, twice.Free(), ErrInvalid)
	})
}

// TestAsyncGoMemory checks the promise for ordinary Go memory: the Async
// copies are complete when they return.
func TestAsyncGoMemory(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		const n = 1<<20 + 3
		d, err := Alloc[int64](0, n)
		noErr(t, err)
		defer func() { noErr(t, d.Free()) }()
		s, err := NewStream(0)
		noErr(t, err)
		defer func() { noErr(t, s.Destroy()) }()
		src := make([]int64, n)
		for i := range src {
			src[i] = int64(i) * 3
		}
		noErr(t, CopyToDeviceAsync(d, src, s))
		want := slices.Clone(src)
		clear(src) // must not reach the device: the copy is done
		got := make([]int64, n)
		noErr(t, CopyToHostAsync(got, d, s))
		if !slices.Equal(got, want) { // no Synchronize: must be there
			t.Fatal("data differs after the Async copies of Go memory returned")
		}
	})
}

// TestFakeAsyncPinnedIsAsync checks, on the fake driver whose streams run
// only when waited for, that copies from pinned memory do not wait, and
// that events and streams report work in flight.
func TestFakeAsyncPinnedIsAsync(t *testing.T) {
	useFake(t)
	p, err := HostAlloc[int32](4)
	noErr(t, err)
	defer func() { noErr(t, p.Free()) }()
	d, err := Alloc[int32](0, 4)
	noErr(t, err)
	defer func() { noErr(t, d.Free()) }()
	s, err := NewStream(0)
	noErr(t, err)
	defer func() { noErr(t, s.Destroy()) }()
	e, err := NewEventNoTiming(0)
	noErr(t, err)
	defer func() { noErr(t, e.Destroy()) }()
	copy(p.Slice(), []int32{1, 2, 3, 4})
	noErr(t, CopyToDeviceAsync(d, p.Slice(), s))
	p.Slice()[0] = 100 // the copy has not run yet
	noErr(t, e.Record(s))
	if done, err := e.Query(); done || err != nil {
		t.Fatalf("Query with work queued = %v, %v", done, err)
	}
	if done, err := e.Query(); !done || err != nil {
		t.Fatalf("Query after the work ran = %v, %v", done, err)
	}
	got := make([]int32, 4)
	noErr(t, CopyToHost(got, d))
	if !slices.Equal(got, []int32{100, 2, 3, 4}) {
		t.Fatalf("got %v: the pinned copy waited", got)
	}
	noErr(t, MemsetAsync(d, 0, s))
	if done, err := s.Query(); done || err != nil {
		t.Fatalf("Stream.Query with work queued = %v, %v", done, err)
	}
}

func TestEvents(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		s1, err := NewStream(0)
		noErr(t, err)
		defer func() { noErr(t, s1.Destroy()) }()
		s2, err := NewStream(0)
		noErr(t, err)
		defer func() { noErr(t, s2.Destroy()) }()
		start, err := NewEvent(0)
		noErr(t, err)
		defer func() { noErr(t, start.Destroy()) }()
		end, err := NewEvent(0)
		noErr(t, err)
		defer func() { noErr(t, end.Destroy()) }()
		fired, err := NewEventNoTiming(0)
		noErr(t, err)

		// Elapsed before any record: a driver error.
		_, err = Elapsed(start, end)
		var ce *Error
		if !errors.As(err, &ce) {
			t.Fatalf("Elapsed before Record: %v, want an *Error", err)
		}

		const n = 64 << 20
		d, err := Alloc[byte](0, n)
		noErr(t, err)
		defer func() { noErr(t, d.Free()) }()
		out, err := HostAlloc[byte](n)
		noErr(t, err)
		defer func() { noErr(t, out.Free()) }()

		// s1 sets the memory; s2 waits for it on the GPU and copies it out.
		noErr(t, start.Record(s1))
		noErr(t, MemsetAsync(d, 0x5a, s1))
		noErr(t, end.Record(s1))
		noErr(t, fired.Record(s1))
		noErr(t, s2.WaitEvent(fired))
		noErr(t, CopyToHostAsync(out.Slice(), d, s2))
		noErr(t, s2.Synchronize())
		if slices.ContainsFunc(out.Slice(), func(b byte) bool { return b != 0x5a }) {
			t.Fatal("s2 did not wait for s1's memset")
		}
		noErr(t, end.Synchronize())
		el, err := Elapsed(start, end)
		noErr(t, err)
		if el < 0 || el > 10*time.Second {
			t.Errorf("Elapsed = %v", el)
		}
		t.Logf("memset of %d MiB: %v", n>>20, el)
		if done, err := end.Query(); !done || err != nil {
			t.Errorf("Query after Synchronize = %v, %v", done, err)
		}

		_, err = Elapsed(start, fired)
		wantIs(t, err, ErrInvalid)
		noErr(t, fired.Destroy())
		noErr(t, fired.Destroy())
		wantIs(t, fired.Record(s1), ErrInvalid)
		wantIs(t, s1.WaitEvent(fired), ErrInvalid)
		if fired.Handle() != 0 {
			t.Error("destroyed event has a handle")
		}

		s3, err := NewStream(0)
		noErr(t, err)
		noErr(t, s3.Destroy())
		noErr(t, s3.Destroy())
		wantIs(t, s3.Synchronize(), ErrInvalid)
		wantIs(t, start.Record(s3), ErrInvalid)
	})
}

// TestStreamMemOps checks WriteValue64 and WaitValue64 on a word of mapped
// page-locked memory: the CPU sees the value once the work before it is
// done, and sees what that work wrote; a stream waiting for a value waits
// for the CPU to write it.
func TestStreamMemOps(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		s, err := NewStream(0)
		noErr(t, err)
		defer func() { noErr(t, s.Destroy()) }()
		const n = 4 << 20
		d, err := Alloc[byte](0, n)
		noErr(t, err)
		defer func() { noErr(t, d.Free()) }()
		words, err := HostAlloc[uint64](8)
		noErr(t, err)
		defer func() { noErr(t, words.Free()) }()
		out, err := HostAlloc[byte](n)
		noErr(t, err)
		defer func() { noErr(t, out.Free()) }()
		w := words.Slice()
		clear(w)
		base, err := words.DevicePtr()
		noErr(t, err)
		if base == 0 {
			t.Fatal("DevicePtr of page-locked memory is 0")
		}
		if p, err := (Pinned[uint64]{}).DevicePtr(); p != 0 || err != nil {
			t.Errorf("DevicePtr of an empty Pinned = %#x, %v", p, err)
		}
		// load reads word i as the GPU leaves it; on the fake, whose
		// streams run only when asked, it asks first.
		load := func(i int) uint64 {
			if fakeActive {
				s.Query()
			}
			return atomicLoad(&w[i])
		}

		// A memset and a copy out, then the value: once the CPU sees the
		// value, the copy's bytes are there.
		noErr(t, MemsetAsync(d, 0x3c, s))
		noErr(t, CopyToHostAsync(out.Slice(), d, s))
		noErr(t, s.WriteValue64(base, 7))
		waitDone(t, func() (bool, error) { return load(0) == 7, nil })
		if i := slices.IndexFunc(out.Slice(), func(b byte) bool { return b != 0x3c }); i >= 0 {
			t.Fatalf("the value was seen before the copy's byte %d arrived", i)
		}

		// A wait already satisfied does not block the stream.
		noErr(t, s.WaitValue64(base, 7))
		noErr(t, s.WriteValue64(base+8, 1))
		noErr(t, s.Synchronize())
		if w[1] != 1 {
			t.Fatalf("after a satisfied wait: word 1 = %d, want 1", w[1])
		}
		if !fakeActive {
			// A wait for a value the CPU has not written holds the
			// stream until it does.
			noErr(t, s.WaitValue64(base, 9))
			noErr(t, s.WriteValue64(base+16, 1))
			time.Sleep(50 * time.Millisecond)
			if done, err := s.Query(); done || err != nil || atomicLoad(&w[2]) != 0 {
				t.Fatalf("the stream went on before the value came: done %v, err %v, word 2 = %d", done, err, w[2])
			}
			atomicStore(&w[0], 9)
			waitDone(t, func() (bool, error) { return atomicLoad(&w[2]) == 1, nil })
		}

		// Bad addresses.
		wantIs(t, s.WriteValue64(0, 1), ErrInvalid)
		wantIs(t, s.WriteValue64(base+4, 1), ErrInvalid)
		wantIs(t, s.WaitValue64(base+1, 1), ErrInvalid)
		var nilStream *Stream
		wantIs(t, nilStream.WriteValue64(base, 1), ErrInvalid)
	})
}

// TestFakeNoMemOps: a driver without stream memory operations makes them
// fail with ErrNotSupported, and everything else still works.
func TestFakeNoMemOps(t *testing.T) {
	path := buildFake(t, "-DFAKE_OMIT_MEMOPS")
	l, err := open(path)
	if err != nil {
		t.Fatalf("loading the fake driver without memory operations: %v", err)
	}
	useLib(t, l, nil)
	fakeActive = true
	defer func() { fakeActive = false }()
	defer l.drv.close()
	s, err := NewStream(0)
	noErr(t, err)
	defer func() { noErr(t, s.Destroy()) }()
	w, err := HostAlloc[uint64](1)
	noErr(t, err)
	defer func() { noErr(t, w.Free()) }()
	p, err := w.DevicePtr()
	noErr(t, err)
	wantIs(t, s.WriteValue64(p, 1), ErrNotSupported)
	wantIs(t, s.WaitValue64(p, 1), ErrNotSupported)
	noErr(t, s.Synchronize())
}

func TestEventsAcrossDevices(t *testing.T) {
	eachDriver(t, 2, func(t *testing.T) {
		s0, err := NewStream(0)
		noErr(t, err)
		defer func() { noErr(t, s0.Destroy()) }()
		s1, err := NewStream(1)
		noErr(t, err)
		defer func() { noErr(t, s1.Destroy()) }()
		e0, err := NewEventNoTiming(0)
		noErr(t, err)
		defer func() { noErr(t, e0.Destroy()) }()
		wantIs(t, e0.Record(s1), ErrInvalid) // an event records on its own device
		noErr(t, e0.Record(s0))
		noErr(t, s1.WaitEvent(e0)) // a stream may wait for another device's event
		noErr(t, s1.Synchronize())
		d1, err := Alloc[int32](1, 8)
		noErr(t, err)
		defer func() { noErr(t, d1.Free()) }()
		wantIs(t, CopyToDeviceAsync(d1, make([]int32, 8), s0), ErrInvalid)
	})
}

// testPTX holds two kernels, written for .target sm_70:
//
//	add_scalar(data *f32, value f32, n u64): data[i] += value for i < n
//	store_args(out *u64, a s32, b u32, c s64, d u64, e f32, f f64):
//	    out[0..5] = a (sign-extended), b, c, d, bits of e, f
const testPTX = `
.version 7.0
.target sm_70
.address_size 64

.visible .entry add_scalar(
	.param .u64 add_scalar_data,
	.param .f32 add_scalar_value,
	.param .u64 add_scalar_n
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<4>;
	.reg .f32 %f<4>;
	.reg .b64 %rd<8>;

	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mul.wide.u32 %rd1, %r1, %r2;
	cvt.u64.u32 %rd2, %r3;
	add.s64 %rd3, %rd1, %rd2;
	ld.param.u64 %rd4, [add_scalar_n];
	setp.ge.u64 %p1, %rd3, %rd4;
	@%p1 bra DONE;
	ld.param.u64 %rd5, [add_scalar_data];
	cvta.to.global.u64 %rd5, %rd5;
	shl.b64 %rd6, %rd3, 2;
	add.s64 %rd7, %rd5, %rd6;
	ld.param.f32 %f1, [add_scalar_value];
	ld.global.f32 %f2, [%rd7];
	add.f32 %f3, %f2, %f1;
	st.global.f32 [%rd7], %f3;
DONE:
	ret;
}

.visible .entry store_args(
	.param .u64 store_args_out,
	.param .s32 store_args_a,
	.param .u32 store_args_b,
	.param .s64 store_args_c,
	.param .u64 store_args_d,
	.param .f32 store_args_e,
	.param .f64 store_args_f
)
{
	.reg .b32 %r<3>;
	.reg .b64 %rd<6>;
	.reg .f32 %f<2>;
	.reg .f64 %fd<2>;

	ld.param.u64 %rd1, [store_args_out];
	cvta.to.global.u64 %rd1, %rd1;
	ld.param.s32 %r1, [store_args_a];
	ld.param.u32 %r2, [store_args_b];
	ld.param.s64 %rd2, [store_args_c];
	ld.param.u64 %rd3, [store_args_d];
	ld.param.f32 %f1, [store_args_e];
	ld.param.f64 %fd1, [store_args_f];
	cvt.s64.s32 %rd4, %r1;
	st.global.u64 [%rd1], %rd4;
	cvt.u64.u32 %rd5, %r2;
	st.global.u64 [%rd1+8], %rd5;
	st.global.u64 [%rd1+16], %rd2;
	st.global.u64 [%rd1+24], %rd3;
	st.global.f32 [%rd1+32], %f1;
	st.global.f64 [%rd1+40], %fd1;
	ret;
}
`

func TestKernel(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		m, err := LoadPTX(0, testPTX)
		noErr(t, err)
		defer func() { noErr(t, m.Unload()) }()
		add, err := m.Function("add_scalar")
		noErr(t, err)
		if add.Name() != "add_scalar" || add.Handle() == 0 || m.Device() != 0 {
			t.Fatalf("function %q handle %#x", add.Name(), add.Handle())
		}
		s, err := NewStream(0)
		noErr(t, err)
		defer func() { noErr(t, s.Destroy()) }()

		const n = 1000
		data := make([]float32, n+24) // the kernel must stop at n
		for i := range data {
			data[i] = float32(i)
		}
		d, err := Alloc[float32](0, n+24)
		noErr(t, err)
		defer func() { noErr(t, d.Free()) }()
		noErr(t, CopyToDevice(d, data))
		grid := [3]uint32{(n + 255) / 256 * 2, 1, 1} // more threads than n
		noErr(t, add.Launch(grid, [3]uint32{256, 1, 1}, 0, s, d, float32(2.5), uint64(n)))
		noErr(t, add.Launch([3]uint32{1, 1, 1}, [3]uint32{8, 1, 1}, 0, s, d.Ptr(), float32(-1), uint64(8)))
		noErr(t, s.Synchronize())
		got := make([]float32, n+24)
		noErr(t, CopyToHost(got, d))
		for i, v := range got {
			want := float32(i)
			if i < n {
				want += 2.5
			}
			if i < 8 {
				want--
			}
			if v != want {
				t.Fatalf("element %d = %v, want %v", i, v, want)
			}
		}

		store, err := m.Function("store_args")
		noErr(t, err)
		out, err := Alloc[uint64](0, 6)
		noErr(t, err)
		defer func() { noErr(t, out.Free()) }()
		noErr(t, Memset(out, 0))
		noErr(t, store.Launch([3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s,
			out, int32(-5), uint32(0xfffffff0), int64(-1<<40), uint64(1<<63+9), float32(0.75), float64(-1e300)))
		noErr(t, s.Synchronize())
		args := make([]uint64, 6)
		noErr(t, CopyToHost(args, out))
		want := []uint64{
			math.MaxUint64 - 4, 0xfffffff0, math.MaxUint64 - 1<<40 + 1, 1<<63 + 9,
			uint64(math.Float32bits(0.75)), math.Float64bits(-1e300),
		}
		if !slices.Equal(args, want) {
			t.Fatalf("store_args stored %#x, want %#x", args, want)
		}

		// Bad arguments are refused before the launch.
		err = add.Launch(grid, [3]uint32{256, 1, 1}, 0, s, d, true, uint64(n))
		wantIs(t, err, ErrInvalid)
		if !strings.Contains(err.Error(), "argument 1 has type bool") {
			t.Errorf("wrong-type error %q", err)
		}
		err = add.Launch(grid, [3]uint32{256, 1, 1}, 0, s, d, float32(1), n)
		wantIs(t, err, ErrInvalid)
		if !strings.Contains(err.Error(), "argument 2 has type int") {
			t.Errorf("wrong-type error %q", err)
		}
		wantIs(t, add.Launch(grid, [3]uint32{256, 1, 1}, 0, nil, d, float32(1), uint64(n)), ErrInvalid)

		_, err = m.Function("no_such_kernel")
		var ce *Error
		if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_NOT_FOUND" {
			t.Errorf("Function(no_such_kernel): %v", err)
		}
		noErr(t, m.Unload())
		noErr(t, m.Unload())
		wantIs(t, add.Launch(grid, [3]uint32{256, 1, 1}, 0, s, d, float32(1), uint64(n)), ErrInvalid)
		_, err = m.Function("add_scalar")
		wantIs(t, err, ErrInvalid)
	})
}

func TestKernelOtherDevice(t *testing.T) {
	eachDriver(t, 2, func(t *testing.T) {
		m, err := LoadPTX(1, testPTX)
		noErr(t, err)
		defer func() { noErr(t, m.Unload()) }()
		add, err := m.Function("add_scalar")
		noErr(t, err)
		d, err := Alloc[float32](1, 3)
		noErr(t, err)
		defer func() { noErr(t, d.Free()) }()
		noErr(t, CopyToDevice(d, []float32{1, 2, 3}))
		s0, err := NewStream(0)
		noErr(t, err)
		defer func() { noErr(t, s0.Destroy()) }()
		wantIs(t, add.Launch([3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, s0, d, float32(1), uint64(3)), ErrInvalid)
		s1, err := NewStream(1)
		noErr(t, err)
		defer func() { noErr(t, s1.Destroy()) }()
		noErr(t, add.Launch([3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, s1, d, float32(1), uint64(3)))
		noErr(t, s1.Synchronize())
		got := make([]float32, 3)
		noErr(t, CopyToHost(got, d))
		if !slices.Equal(got, []float32{2, 3, 4}) {
			t.Fatalf("got %v", got)
		}
	})
}

func TestPTXError(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		bad := ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry broken()\n{\n\tbogus.instruction %r1;\n\tret;\n}\n"
		_, err := LoadPTX(0, bad)
		var ce *Error
		if !errors.As(err, &ce) {
			t.Fatalf("LoadPTX(bad): %v, want an *Error", err)
		}
		t.Logf("%v", err)
		if ce.Op != "cuModuleLoadDataEx" || ce.Log == "" {
			t.Errorf("op %q, log %q", ce.Op, ce.Log)
		}
	})
}

// TestConcurrentUse runs copies on every device from many goroutines, so
// that calls land on many OS threads: each must find its context made
// current for it, whatever the thread did before.
func TestConcurrentUse(t *testing.T) {
	eachDriver(t, 1, func(t *testing.T) {
		n, err := DeviceCount()
		noErr(t, err)
		errs := make(chan error, 8)
		for g := range 8 {
			go func() {
				errs <- func() error {
					for i := range 20 {
						d := Device((g + i) % n)
						s, err := Alloc[int32](d, 1024)
						if err != nil {
							return err
						}
						src := make([]int32, 1024)
						for j := range src {
							src[j] = int32(g*1000 + i + j)
						}
						dst := make([]int32, 1024)
						err = errors.Join(CopyToDevice(s, src), CopyToHost(dst, s), s.Free())
						if err != nil {
							return err
						}
						if !slices.Equal(src, dst) {
							return fmt.Errorf("goroutine %d round %d: data differs", g, i)
						}
					}
					return nil
				}()
			}()
		}
		for range 8 {
			noErr(t, <-errs)
		}
	})
}

// ---- Fake-only tests of the loader ----

func TestFakeInitNoDevice(t *testing.T) {
	path := buildFake(t, "-DFAKE_INIT_RESULT=100")
	_, err := load(path)
	wantIs(t, err, ErrNotSupported)
	var ce *Error
	if !errors.As(err, &ce) || ce.Op != "cuInit" || ce.Name != "CUDA_ERROR_NO_DEVICE" {
		t.Fatalf("load: %v", err)
	}
}

func TestFakeMissingSymbol(t *testing.T) {
	path := buildFake(t, "-DFAKE_OMIT_LAUNCH")
	_, err := load(path)
	wantIs(t, err, ErrNotSupported)
	if !strings.Contains(err.Error(), "missing symbol cuLaunchKernel") || !strings.Contains(err.Error(), path) {
		t.Fatalf("load: %v", err)
	}
}

// TestFakeContextDiscipline checks that the fake really refuses calls made
// without a context, so the other fake tests prove the package sets one.
func TestFakeContextDiscipline(t *testing.T) {
	l := useFake(t)
	err := l.drv.memFree(0, 0x1000)
	var ce *Error
	if !errors.As(err, &ce) || ce.Op != "cuCtxPushCurrent" {
		t.Fatalf("memFree without a context: %v", err)
	}
	_, err = l.drv.streamCreate(0, cuStreamNonBlocking)
	if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_INVALID_CONTEXT" {
		t.Fatalf("streamCreate without a context: %v", err)
	}
	// A device pointer of device 1 used in device 0's context.
	d1, err := Alloc[int32](1, 4)
	noErr(t, err)
	defer func() { noErr(t, d1.Free()) }()
	ctx0, err := l.context(0, "test")
	noErr(t, err)
	err = l.drv.memcpyHtoD(ctx0, d1.Ptr(), make([]byte, 16))
	if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_INVALID_VALUE" {
		t.Fatalf("copy into another device's memory: %v", err)
	}
}

func atomicLoad(p *uint64) uint64     { return atomic.LoadUint64(p) }
func atomicStore(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
