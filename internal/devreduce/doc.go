// Package devreduce holds courier's reduction kernels for device memory:
// dst[i] = a[i] op b[i] on the GPU, for every element type and operator
// of the backend contract (backend.ReduceOp.AppliesTo), so that package
// mp's collectives over point-to-point messages combine device buffers
// where they lie instead of staging them through host memory.
//
// The kernels are PTX written by this package (ptx.go), one module per
// element type, loaded with cuda.LoadPTX once per device and type, on
// first use, and launched on the caller's stream. Each kernel is named
// "courier_combine_<type>_<op>" (Name).
//
// What they compute is what internal/reduce computes on the host:
//
//   - integers wrap around;
//   - float32 and float64 are added and multiplied once, rounded to
//     nearest (no fused multiply-add);
//   - Float16 and BFloat16 are widened to float32, combined there, and
//     rounded back to nearest, ties to even, as reduce.F32To16 and
//     reduce.F32ToBF16 do (a NaN becomes 0x7e00 with its sign, or keeps
//     its upper half made quiet);
//   - Min and Max are Go's min and max as the compiler lowers them on
//     amd64, NaN payloads and signed zeros included (floatOp says how);
//   - complex numbers add part by part, and multiply as Go multiplies
//     them: (ac − bd) + (ad + bc)i, in float64 (complex64's parts widened,
//     the results rounded back).
//
// So a result matches the host's bit for bit, with one exception: a Sum
// or a Prod whose result is a NaN is a NaN on both, but the GPU's
// arithmetic makes its own NaN (0x7fffffff, or 0x7e00 once rounded to a
// Float16) where the host's keeps an operand's payload and sign. (The
// host here is amd64 as Go builds it by default; an arm64 host, or
// GOAMD64=v3, where Go fuses a multiply and an add, may differ in a
// complex product's last bit, and arm64's min and max pick NaNs
// otherwise.)
//
// It imports the contract (for the element types and operators) and the
// CUDA loader.
//
// Files:
//
//	ptx.go      the kernels' PTX, written out per type and operator
//	combine.go  Combine, and the modules loaded per device and type
package devreduce
