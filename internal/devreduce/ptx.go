package devreduce

import (
	"fmt"
	"strings"

	"github.com/courier-mp/courier/backend"
)

// The kernels' PTX, written here: one module per element type, holding a
// kernel for each operator that applies to it (backend.ReduceOp.AppliesTo).
// Each kernel is
//
//	NAME(dst, a, b *T, n u64): dst[i] = a[i] op b[i] for every i < n
//
// over a grid-stride loop, so any grid covers any n. Every arithmetic
// instruction carries its rounding mode (.rn), which keeps the compiler
// from fusing a multiply and an add: the host does neither. What each
// operator computes, and where it must match internal/reduce bit for bit,
// is in the package doc.

// ptxVersion and ptxTarget head every module: cvt between float16 and
// float32 needs sm_53, and 7.8 is the first PTX ISA of sm_90; the driver
// compiles the text for the device it loads it on.
const (
	ptxVersion = "7.8"
	ptxTarget  = "sm_80"
)

// Name is the name of the kernel that combines elements of type t with
// op: "courier_combine_float32_sum" (the type as DType.String names it,
// the operator as ReduceOp.String).
func Name(t backend.DType, op backend.ReduceOp) string {
	return "courier_combine_" + t.String() + "_" + op.String()
}

// ops is every operator, in their order.
var ops = []backend.ReduceOp{backend.Sum, backend.Prod, backend.Min, backend.Max}

// PTX is the PTX text of the module of type t's kernels, one per operator
// that applies to t, named by Name. It is empty for an invalid type.
func PTX(t backend.DType) string {
	if !t.Valid() {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// courier's combine kernels for %v: dst[i] = a[i] op b[i] (internal/devreduce).\n", t)
	fmt.Fprintf(&b, ".version %s\n.target %s\n.address_size 64\n", ptxVersion, ptxTarget)
	for _, op := range ops {
		if op.AppliesTo(t) {
			b.WriteString("\n")
			b.WriteString(kernel(t, op))
		}
	}
	return b.String()
}

// gen writes one kernel's body, numbering the registers it takes.
type gen struct {
	b                  strings.Builder
	p, h, r, rd, f, fd int // registers used so far, by kind
}

func (g *gen) line(format string, args ...any) {
	g.b.WriteByte('\t')
	fmt.Fprintf(&g.b, format, args...)
	g.b.WriteString(";\n")
}

// Fresh registers: predicates, 16-bit, 32-bit and 64-bit bit registers,
// float32 and float64.
func (g *gen) pred() string { g.p++; return fmt.Sprintf("%%p%d", g.p) }
func (g *gen) b16() string  { g.h++; return fmt.Sprintf("%%h%d", g.h) }
func (g *gen) b32() string  { g.r++; return fmt.Sprintf("%%r%d", g.r) }
func (g *gen) b64() string  { g.rd++; return fmt.Sprintf("%%rd%d", g.rd) }
func (g *gen) f32() string  { g.f++; return fmt.Sprintf("%%f%d", g.f) }
func (g *gen) f64() string  { g.fd++; return fmt.Sprintf("%%fd%d", g.fd) }

// kernel is the PTX of the kernel of t and op.
func kernel(t backend.DType, op backend.ReduceOp) string {
	name := Name(t, op)
	g := &gen{}
	dst, a, b, n := g.b64(), g.b64(), g.b64(), g.b64()
	g.line("ld.param.u64 %s, [%s_dst]", dst, name)
	g.line("ld.param.u64 %s, [%s_a]", a, name)
	g.line("ld.param.u64 %s, [%s_b]", b, name)
	g.line("ld.param.u64 %s, [%s_n]", n, name)
	g.line("cvta.to.global.u64 %s, %s", dst, dst)
	g.line("cvta.to.global.u64 %s, %s", a, a)
	g.line("cvta.to.global.u64 %s, %s", b, b)
	// i = ctaid.x × ntid.x + tid.x; stride = nctaid.x × ntid.x.
	cta, ntid, tid, ncta := g.b32(), g.b32(), g.b32(), g.b32()
	g.line("mov.u32 %s, %%ctaid.x", cta)
	g.line("mov.u32 %s, %%ntid.x", ntid)
	g.line("mov.u32 %s, %%tid.x", tid)
	g.line("mov.u32 %s, %%nctaid.x", ncta)
	i, t64, stride := g.b64(), g.b64(), g.b64()
	g.line("mul.wide.u32 %s, %s, %s", i, cta, ntid)
	g.line("cvt.u64.u32 %s, %s", t64, tid)
	g.line("add.s64 %s, %s, %s", i, i, t64)
	g.line("mul.wide.u32 %s, %s, %s", stride, ncta, ntid)
	fmt.Fprintf(&g.b, "%s_loop:\n", name)
	end := g.pred()
	g.line("setp.ge.u64 %s, %s, %s", end, i, n)
	g.line("@%s bra %s_done", end, name)
	off, pa, pb, pd := g.b64(), g.b64(), g.b64(), g.b64()
	g.line("shl.b64 %s, %s, %d", off, i, log2(t.Size()))
	g.line("add.s64 %s, %s, %s", pa, a, off)
	g.line("add.s64 %s, %s, %s", pb, b, off)
	g.line("add.s64 %s, %s, %s", pd, dst, off)
	g.element(t, op, pd, pa, pb)
	g.line("add.s64 %s, %s, %s", i, i, stride)
	g.line("bra %s_loop", name)
	fmt.Fprintf(&g.b, "%s_done:\n", name)
	g.line("ret")

	var k strings.Builder
	fmt.Fprintf(&k, ".visible .entry %s(\n", name)
	fmt.Fprintf(&k, "\t.param .u64 %s_dst,\n\t.param .u64 %s_a,\n\t.param .u64 %s_b,\n\t.param .u64 %s_n\n)\n{\n", name, name, name, name)
	for _, d := range []struct {
		kind, prefix string
		n            int
	}{{".pred", "%p", g.p}, {".b16", "%h", g.h}, {".b32", "%r", g.r}, {".b64", "%rd", g.rd}, {".f32", "%f", g.f}, {".f64", "%fd", g.fd}} {
		if d.n > 0 {
			fmt.Fprintf(&k, "\t.reg %s %s<%d>;\n", d.kind, d.prefix, d.n+1)
		}
	}
	k.WriteString("\n")
	k.WriteString(g.b.String())
	k.WriteString("}\n")
	return k.String()
}

// log2 is the base-2 logarithm of an element size (a power of two).
func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// element writes what one thread does for element i: load a[i] and b[i]
// (at pa and pb), combine, store at pd.
func (g *gen) element(t backend.DType, op backend.ReduceOp, pd, pa, pb string) {
	switch t {
	case backend.Int8, backend.Uint8, backend.Int16, backend.Uint16, backend.Int32, backend.Uint32:
		// Loaded sign- or zero-extended into 32 bits, combined there and
		// stored truncated: the low bits of a sum or a product do not
		// depend on the bits above them, so the result wraps as the
		// host's does.
		ty := intType(t)
		x, y, z := g.b32(), g.b32(), g.b32()
		g.line("ld.global.%s %s, [%s]", ty, x, pa)
		g.line("ld.global.%s %s, [%s]", ty, y, pb)
		g.intOp(op, ty[:1], 32, z, x, y)
		g.line("st.global.u%d [%s], %s", 8*t.Size(), pd, z)
	case backend.Int64, backend.Uint64:
		ty := intType(t)
		x, y, z := g.b64(), g.b64(), g.b64()
		g.line("ld.global.%s %s, [%s]", ty, x, pa)
		g.line("ld.global.%s %s, [%s]", ty, y, pb)
		g.intOp(op, ty[:1], 64, z, x, y)
		g.line("st.global.u64 [%s], %s", pd, z)
	case backend.Float32:
		x, y := g.b32(), g.b32()
		g.line("ld.global.b32 %s, [%s]", x, pa)
		g.line("ld.global.b32 %s, [%s]", y, pb)
		z := g.floatOp(op, 32, x, y)
		g.line("st.global.b32 [%s], %s", pd, z)
	case backend.Float64:
		x, y := g.b64(), g.b64()
		g.line("ld.global.b64 %s, [%s]", x, pa)
		g.line("ld.global.b64 %s, [%s]", y, pb)
		z := g.floatOp(op, 64, x, y)
		g.line("st.global.b64 [%s], %s", pd, z)
	case backend.Float16:
		x, y := g.halfIn(pa), g.halfIn(pb)
		g.halfOut(pd, g.floatOp(op, 32, x, y))
	case backend.BFloat16:
		x, y := g.bf16In(pa), g.bf16In(pb)
		g.bf16Out(pd, g.floatOp(op, 32, x, y))
	case backend.Complex64, backend.Complex128:
		g.complexOp(t, op, pd, pa, pb)
	}
}

// intType is the load type of integer type t: s8, u8, …, u64.
func intType(t backend.DType) string {
	sign := "u"
	switch t {
	case backend.Int8, backend.Int16, backend.Int32, backend.Int64:
		sign = "s"
	}
	return fmt.Sprintf("%s%d", sign, 8*t.Size())
}

// intOp writes z = x op y on w-bit registers, signed ("s") or not ("u").
func (g *gen) intOp(op backend.ReduceOp, sign string, w int, z, x, y string) {
	switch op {
	case backend.Sum:
		g.line("add.s%d %s, %s, %s", w, z, x, y)
	case backend.Prod:
		g.line("mul.lo.s%d %s, %s, %s", w, z, x, y)
	case backend.Min:
		g.line("min.%s%d %s, %s, %s", sign, w, z, x, y)
	case backend.Max:
		g.line("max.%s%d %s, %s, %s", sign, w, z, x, y)
	}
}

// floatOp combines the floats whose bits are in x and y (w-bit
// registers) and returns the register holding the result's bits.
//
// Min and Max follow Go's min and max on amd64 bit for bit, NaN payloads
// and signed zeros included: min(x, y) is the bitwise OR of t1 = (x < y ?
// x : y) and t2 = (t1 < x ? t1 : x) (two MINSS and a POR, the compiler's
// lowering), and max(x, y) is −min(−x, −y), negation flipping the sign
// bit. So a NaN operand gives a NaN, −0 and +0 give −0 for min and +0
// for max, whichever comes first.
func (g *gen) floatOp(op backend.ReduceOp, w int, x, y string) string {
	reg, freg := g.b32, g.f32
	if w == 64 {
		reg, freg = g.b64, g.f64
	}
	switch op {
	case backend.Sum, backend.Prod:
		fx, fy, fz, z := freg(), freg(), freg(), reg()
		g.line("mov.b%d %s, %s", w, fx, x)
		g.line("mov.b%d %s, %s", w, fy, y)
		ins := "add"
		if op == backend.Prod {
			ins = "mul"
		}
		g.line("%s.rn.f%d %s, %s, %s", ins, w, fz, fx, fy)
		g.line("mov.b%d %s, %s", w, z, fz)
		return z
	case backend.Min:
		return g.floatMin(w, x, y)
	}
	sign := "0x80000000"
	if w == 64 {
		sign = "0x8000000000000000"
	}
	nx, ny, z := reg(), reg(), reg()
	g.line("xor.b%d %s, %s, %s", w, nx, x, sign)
	g.line("xor.b%d %s, %s, %s", w, ny, y, sign)
	m := g.floatMin(w, nx, ny)
	g.line("xor.b%d %s, %s, %s", w, z, m, sign)
	return z
}

// floatMin writes amd64's min of the floats whose bits are in x and y
// (see floatOp) and returns the register holding the result's bits.
func (g *gen) floatMin(w int, x, y string) string {
	reg, freg := g.b32, g.f32
	if w == 64 {
		reg, freg = g.b64, g.f64
	}
	fx, fy, ft, lt, lt2, t1, t2, z := freg(), freg(), freg(), g.pred(), g.pred(), reg(), reg(), reg()
	g.line("mov.b%d %s, %s", w, fx, x)
	g.line("mov.b%d %s, %s", w, fy, y)
	g.line("setp.lt.f%d %s, %s, %s", w, lt, fx, fy)
	g.line("selp.b%d %s, %s, %s, %s", w, t1, x, y, lt)
	g.line("mov.b%d %s, %s", w, ft, t1)
	g.line("setp.lt.f%d %s, %s, %s", w, lt2, ft, fx)
	g.line("selp.b%d %s, %s, %s, %s", w, t2, t1, x, lt2)
	g.line("or.b%d %s, %s, %s", w, z, t1, t2)
	return z
}

// halfIn loads the float16 at p and returns a 32-bit register holding
// its float32 bits, as reduce.F16To32 widens it: exactly, and an infinity
// or a NaN keeps its sign and payload (the hardware conversion may not
// keep a NaN's, so those are built from the bits).
func (g *gen) halfIn(p string) string {
	h, u, fw, w, e, s, m, special, x := g.b16(), g.b32(), g.f32(), g.b32(), g.b32(), g.b32(), g.b32(), g.pred(), g.b32()
	g.line("ld.global.b16 %s, [%s]", h, p)
	g.line("cvt.u32.u16 %s, %s", u, h)
	g.line("cvt.f32.f16 %s, %s", fw, h)
	g.line("mov.b32 %s, %s", w, fw)
	g.line("and.b32 %s, %s, 0x7c00", e, u)
	g.line("setp.eq.u32 %s, %s, 0x7c00", special, e)
	g.line("and.b32 %s, %s, 0x8000", s, u)
	g.line("shl.b32 %s, %s, 16", s, s)
	g.line("and.b32 %s, %s, 0x3ff", m, u)
	g.line("shl.b32 %s, %s, 13", m, m)
	g.line("or.b32 %s, %s, %s", s, s, m)
	g.line("or.b32 %s, %s, 0x7f800000", s, s)
	g.line("selp.b32 %s, %s, %s, %s", x, s, w, special)
	return x
}

// halfOut rounds the float32 whose bits are in x to a float16 as
// reduce.F32To16 does (to nearest, ties to even; a NaN becomes the quiet
// NaN 0x7e00 with x's sign) and stores it at p.
func (g *gen) halfOut(p, x string) {
	f, h, u, abs, nan, q, out := g.f32(), g.b16(), g.b32(), g.b32(), g.pred(), g.b32(), g.b32()
	g.line("mov.b32 %s, %s", f, x)
	g.line("cvt.rn.f16.f32 %s, %s", h, f)
	g.line("cvt.u32.u16 %s, %s", u, h)
	g.line("and.b32 %s, %s, 0x7fffffff", abs, x)
	g.line("setp.gt.u32 %s, %s, 0x7f800000", nan, abs)
	g.line("shr.u32 %s, %s, 16", q, x)
	g.line("and.b32 %s, %s, 0x8000", q, q)
	g.line("or.b32 %s, %s, 0x7e00", q, q)
	g.line("selp.b32 %s, %s, %s, %s", out, q, u, nan)
	g.line("st.global.u16 [%s], %s", p, out)
}

// bf16In loads the bfloat16 at p and returns a 32-bit register holding
// its float32 bits (the upper half of them).
func (g *gen) bf16In(p string) string {
	x := g.b32()
	g.line("ld.global.u16 %s, [%s]", x, p)
	g.line("shl.b32 %s, %s, 16", x, x)
	return x
}

// bf16Out rounds the float32 whose bits are in x to a bfloat16 with
// reduce.F32ToBF16's integer arithmetic (to nearest, ties to even; a NaN
// keeps its upper half, made quiet) and stores it at p.
func (g *gen) bf16Out(p, x string) {
	abs, nan, q, qn, lsb, r, out := g.b32(), g.pred(), g.b32(), g.b32(), g.b32(), g.b32(), g.b32()
	g.line("and.b32 %s, %s, 0x7fffffff", abs, x)
	g.line("setp.gt.u32 %s, %s, 0x7f800000", nan, abs)
	g.line("shr.u32 %s, %s, 16", q, x)
	g.line("or.b32 %s, %s, 0x40", qn, q)
	g.line("and.b32 %s, %s, 1", lsb, q)
	g.line("add.s32 %s, %s, 0x7fff", r, x)
	g.line("add.s32 %s, %s, %s", r, r, lsb)
	g.line("shr.u32 %s, %s, 16", r, r)
	g.line("selp.b32 %s, %s, %s, %s", out, qn, r, nan)
	g.line("st.global.u16 [%s], %s", p, out)
}

// complexOp writes the combination of complex numbers: Sum part by part;
// Prod as Go computes it, (ac − bd) + (ad + bc)i in that order, in float64
// for both types (Go widens complex64's parts and rounds the results back).
func (g *gen) complexOp(t backend.DType, op backend.ReduceOp, pd, pa, pb string) {
	w, half := 32, 4
	freg := g.f32
	if t == backend.Complex128 {
		w, half, freg = 64, 8, g.f64
	}
	ar, ai, br, bi := freg(), freg(), freg(), freg()
	g.line("ld.global.f%d %s, [%s]", w, ar, pa)
	g.line("ld.global.f%d %s, [%s+%d]", w, ai, pa, half)
	g.line("ld.global.f%d %s, [%s]", w, br, pb)
	g.line("ld.global.f%d %s, [%s+%d]", w, bi, pb, half)
	if op == backend.Sum {
		re, im := freg(), freg()
		g.line("add.rn.f%d %s, %s, %s", w, re, ar, br)
		g.line("add.rn.f%d %s, %s, %s", w, im, ai, bi)
		g.line("st.global.f%d [%s], %s", w, pd, re)
		g.line("st.global.f%d [%s+%d], %s", w, pd, half, im)
		return
	}
	a, b, c, d := ar, ai, br, bi
	if w == 32 {
		a, b, c, d = g.f64(), g.f64(), g.f64(), g.f64()
		g.line("cvt.f64.f32 %s, %s", a, ar)
		g.line("cvt.f64.f32 %s, %s", b, ai)
		g.line("cvt.f64.f32 %s, %s", c, br)
		g.line("cvt.f64.f32 %s, %s", d, bi)
	}
	ac, bd, ad, bc, re, im := g.f64(), g.f64(), g.f64(), g.f64(), g.f64(), g.f64()
	g.line("mul.rn.f64 %s, %s, %s", ac, a, c)
	g.line("mul.rn.f64 %s, %s, %s", bd, b, d)
	g.line("sub.rn.f64 %s, %s, %s", re, ac, bd)
	g.line("mul.rn.f64 %s, %s, %s", ad, a, d)
	g.line("mul.rn.f64 %s, %s, %s", bc, b, c)
	g.line("add.rn.f64 %s, %s, %s", im, ad, bc)
	if w == 32 {
		r32, i32 := g.f32(), g.f32()
		g.line("cvt.rn.f32.f64 %s, %s", r32, re)
		g.line("cvt.rn.f32.f64 %s, %s", i32, im)
		re, im = r32, i32
	}
	g.line("st.global.f%d [%s], %s", w, pd, re)
	g.line("st.global.f%d [%s+%d], %s", w, pd, half, im)
}
