package devreduce

import (
	"errors"
	"math"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/courier-mp/courier/backend"
)

// The kernels are checked on a GPU, and their C twins on the fake GPU,
// against internal/reduce by backend/nccl's tests (TestGPUCombineKernels,
// TestFakeGPUChildCombineKernels). These check the text and the
// arguments without one.

var allOps = []backend.ReduceOp{backend.Sum, backend.Prod, backend.Min, backend.Max}

// TestPTXKernels: each type's module declares, under one header, the
// kernel of each operator that applies to the type and no other.
func TestPTXKernels(t *testing.T) {
	entry := regexp.MustCompile(`\.visible \.entry (\w+)\(`)
	total := 0
	for ty := backend.Int8; ty <= backend.Complex128; ty++ {
		ptx := PTX(ty)
		if !strings.HasPrefix(ptx, "//") || !strings.Contains(ptx, "\n.version "+ptxVersion+"\n.target "+ptxTarget+"\n.address_size 64\n") {
			t.Errorf("%v: the module's header:\n%.200s", ty, ptx)
		}
		var want []string
		for _, op := range allOps {
			if op.AppliesTo(ty) {
				want = append(want, Name(ty, op))
			}
		}
		var got []string
		for _, m := range entry.FindAllStringSubmatch(ptx, -1) {
			got = append(got, m[1])
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%v: kernels %v, want %v", ty, got, want)
		}
		total += len(got)
	}
	if total != 4*12+2*2 {
		t.Errorf("%d kernels, want one per operator of each type (52)", total)
	}
	if PTX(backend.Invalid) != "" || PTX(backend.DType(200)) != "" {
		t.Error("a module for an invalid type")
	}
	if got := Name(backend.BFloat16, backend.Max); got != "courier_combine_bfloat16_max" {
		t.Errorf("Name = %q", got)
	}
}

// TestPTXWellFormed: in every kernel, the braces close, each register
// used is one the kernel declares, each label branched to is defined
// once, each parameter read is declared, and every statement ends with a
// semicolon (what the driver's assembler rejects first).
func TestPTXWellFormed(t *testing.T) {
	reg := regexp.MustCompile(`%(p|h|r|rd|f|fd)(\d+)\b`)
	decl := regexp.MustCompile(`\.reg \.\w+ %(p|h|r|rd|f|fd)<(\d+)>;`)
	param := regexp.MustCompile(`\[(courier_combine_\w+)\]`)
	for ty := backend.Int8; ty <= backend.Complex128; ty++ {
		for _, op := range allOps {
			if !op.AppliesTo(ty) {
				continue
			}
			name := Name(ty, op)
			k := kernel(ty, op)
			if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || !strings.HasSuffix(k, "}\n") {
				t.Errorf("%s: braces", name)
			}
			declared := map[string]int{}
			for _, m := range decl.FindAllStringSubmatch(k, -1) {
				declared[m[1]], _ = strconv.Atoi(m[2])
			}
			body := k[strings.Index(k, "{")+1:]
			for _, m := range reg.FindAllStringSubmatch(body, -1) {
				n, _ := strconv.Atoi(m[2])
				if n < 1 || n >= declared[m[1]] {
					t.Errorf("%s: %s is not declared (%%%s<%d>)", name, m[0], m[1], declared[m[1]])
				}
			}
			labels := map[string]int{}
			for _, line := range strings.Split(body, "\n") {
				line = strings.TrimSpace(line)
				switch {
				case line == "" || line == "}" || strings.HasPrefix(line, ".reg "):
				case strings.HasSuffix(line, ":"):
					labels[strings.TrimSuffix(line, ":")]++
				case !strings.HasSuffix(line, ";"):
					t.Errorf("%s: %q does not end with a semicolon", name, line)
				}
			}
			for _, l := range []string{name + "_loop", name + "_done"} {
				if labels[l] != 1 || !strings.Contains(body, "bra "+l+";") {
					t.Errorf("%s: label %s defined %d times, or never branched to", name, l, labels[l])
				}
			}
			for _, m := range param.FindAllStringSubmatch(body, -1) {
				if !strings.Contains(k, ".param .u64 "+m[1]) {
					t.Errorf("%s: parameter %s is not declared", name, m[1])
				}
			}
		}
	}
}

// TestMinMaxAsAmd64: Go's min and max of floats on amd64 are what the
// kernels compute (floatOp): the OR of t1 = (x < y ? x : y) and t2 = (t1
// < x ? t1 : x), and max through negated operands, NaN payloads and
// signed zeros included. So the kernels' Min and Max match
// internal/reduce's bit for bit there.
func TestMinMaxAsAmd64(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("Go lowers min and max otherwise on %s", runtime.GOARCH)
	}
	kmin := func(x, y uint32) uint32 {
		t1 := y
		if math.Float32frombits(x) < math.Float32frombits(y) {
			t1 = x
		}
		t2 := x
		if math.Float32frombits(t1) < math.Float32frombits(x) {
			t2 = t1
		}
		return t1 | t2
	}
	kmax := func(x, y uint32) uint32 { return kmin(x^1<<31, y^1<<31) ^ 1<<31 }
	vals := []uint32{0, 1 << 31, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000, 0x7fc00001, 0xffc00002, 0x7f800003, 0xff800004, 1, 0x80000001}
	state := uint32(1)
	for range 2000 {
		state = state*1664525 + 1013904223
		vals = append(vals, state)
	}
	for _, x := range vals {
		for _, y := range vals[:40] {
			fx, fy := math.Float32frombits(x), math.Float32frombits(y)
			if got, want := kmin(x, y), math.Float32bits(min(fx, fy)); got != want {
				t.Fatalf("min(%#x, %#x): the kernels' %#x, Go's %#x", x, y, got, want)
			}
			if got, want := kmax(x, y), math.Float32bits(max(fx, fy)); got != want {
				t.Fatalf("max(%#x, %#x): the kernels' %#x, Go's %#x", x, y, got, want)
			}
		}
	}
}

// TestCombineInvalid: arguments that do not fit are ErrInvalid, before
// any driver call (so here, with no GPU).
func TestCombineInvalid(t *testing.T) {
	dev := func(ty backend.DType, n int64) backend.Buffer {
		return backend.Buffer{Count: n, Type: ty, Mem: backend.Device}
	}
	for _, c := range []struct {
		name       string
		dst, a, b  backend.Buffer
		op         backend.ReduceOp
		wantSubstr string
	}{
		{"min of complex numbers", dev(backend.Complex64, 4), dev(backend.Complex64, 4), dev(backend.Complex64, 4), backend.Min, "not defined"},
		{"no operator", dev(backend.Float32, 4), dev(backend.Float32, 4), dev(backend.Float32, 4), 0, "not defined"},
		{"types differ", dev(backend.Float32, 4), dev(backend.Int32, 4), dev(backend.Float32, 4), backend.Sum, "operands are"},
		{"an operand too short", dev(backend.Float32, 4), dev(backend.Float32, 3), dev(backend.Float32, 4), backend.Sum, "elements"},
		{"no stream", dev(backend.Float32, 4), dev(backend.Float32, 4), dev(backend.Float32, 4), backend.Sum, "stream"},
	} {
		err := Combine(c.dst, c.a, c.b, c.op, nil)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), c.wantSubstr) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", c.name, err, c.wantSubstr)
		}
	}
}
