package nccl

import (
	"fmt"
	"math"

	"github.com/courier-mp/courier/backend"
)

// ncclType is an ncclDataType_t (nccl.h).
type ncclType int32

// The NCCL element types courier uses.
const (
	ncclInt8     ncclType = 0
	ncclUint8    ncclType = 1
	ncclInt32    ncclType = 2
	ncclUint32   ncclType = 3
	ncclInt64    ncclType = 4
	ncclUint64   ncclType = 5
	ncclFloat16  ncclType = 6
	ncclFloat32  ncclType = 7
	ncclFloat64  ncclType = 8
	ncclBfloat16 ncclType = 9
)

// ncclTypes maps the element types NCCL has to its codes. The others
// (int16, uint16, complex64, complex128) have no NCCL type and travel as
// bytes: ncclUint8 with count × element size. Point-to-point transfers copy
// bits whatever the type, so both forms move the same data; the native
// type only makes NCCL's own logs read better.
var ncclTypes = map[backend.DType]ncclType{
	backend.Int8:     ncclInt8,
	backend.Uint8:    ncclUint8,
	backend.Int32:    ncclInt32,
	backend.Uint32:   ncclUint32,
	backend.Int64:    ncclInt64,
	backend.Uint64:   ncclUint64,
	backend.Float16:  ncclFloat16,
	backend.BFloat16: ncclBfloat16,
	backend.Float32:  ncclFloat32,
	backend.Float64:  ncclFloat64,
}

// wireType returns the NCCL type and element count that move count
// elements of t: t's own NCCL type, or bytes for the types NCCL lacks.
func wireType(t backend.DType, count int64) (ncclType, uint64, error) {
	if !t.Valid() {
		return 0, 0, fmt.Errorf("%w: element type %v", backend.ErrInvalid, t)
	}
	if count < 0 {
		return 0, 0, fmt.Errorf("%w: negative count %d", backend.ErrInvalid, count)
	}
	if nt, ok := ncclTypes[t]; ok {
		return nt, uint64(count), nil
	}
	size := int64(t.Size())
	if count > math.MaxInt64/size {
		return 0, 0, fmt.Errorf("%w: %d × %v is too large", backend.ErrInvalid, count, t)
	}
	return ncclUint8, uint64(count * size), nil
}

// ncclRedOp is an ncclRedOp_t (nccl.h).
type ncclRedOp int32

// NCCL's reduction operators, by courier's.
var ncclOps = map[backend.ReduceOp]ncclRedOp{
	backend.Sum:  0, // ncclSum
	backend.Prod: 1, // ncclProd
	backend.Max:  2, // ncclMax
	backend.Min:  3, // ncclMin
}

// collType returns the NCCL type and element count in which NCCL runs a
// collective of count elements of t: for one that combines values (op
// set), t's own NCCL type, or, for a Sum of complex numbers, their real
// type with twice the count; for one that only moves them, any form
// (wireType). ok is false where NCCL cannot (int16 and uint16, products of
// complex numbers, Min and Max of them).
func collType(t backend.DType, count int64, reduces bool, op backend.ReduceOp) (ncclType, uint64, bool) {
	if !reduces {
		nt, n, err := wireType(t, count)
		return nt, n, err == nil
	}
	if _, ok := ncclOps[op]; !ok || count < 0 {
		return 0, 0, false
	}
	if nt, ok := ncclTypes[t]; ok {
		return nt, uint64(count), true
	}
	if op != backend.Sum || count > math.MaxInt64/2 {
		return 0, 0, false
	}
	switch t {
	case backend.Complex64:
		return ncclFloat32, uint64(2 * count), true
	case backend.Complex128:
		return ncclFloat64, uint64(2 * count), true
	}
	return 0, 0, false
}
