package mp

import (
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/reduce"
)

// combine sets dst to a op b (host memory of one shape), element by
// element: dst[i] = a[i] op b[i], with internal/reduce's kernels (which
// the shared-memory collectives use too). dst may be a or b itself (the
// same memory, not a part of it). The operator applies to the type
// (checkColl made sure). Which operand is a matters for the bits of a
// floating-point result (a NaN's payload, a complex product), so every
// algorithm passes the value of the lower ranks as a: ranks that combine
// the same two values get the same bits.
func combine(dst, a, b backend.Buffer, op Op) { reduce.Combine(dst, a, b, op.reduceOp()) }

// view is host buffer b as a slice of T.
func view[T any](b backend.Buffer) []T {
	return unsafe.Slice((*T)(b.Ptr), b.Count)
}
