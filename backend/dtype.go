package backend

import "fmt"

// DType is an element type code. The values are part of the wire format
// (backend/tcp/PROTOCOL.md) and never change meaning.
type DType uint8

// Element types. Go's int and uint travel as Int64 and Uint64 on 64-bit
// platforms, uintptr as Uint64.
const (
	Invalid DType = iota
	Int8
	Uint8
	Int16
	Uint16
	Int32
	Uint32
	Int64
	Uint64
	Float16
	BFloat16
	Float32
	Float64
	Complex64
	Complex128
	numDTypes
)

var dtypeInfo = [numDTypes]struct {
	name string
	size int
}{
	Invalid:    {"invalid", 0},
	Int8:       {"int8", 1},
	Uint8:      {"uint8", 1},
	Int16:      {"int16", 2},
	Uint16:     {"uint16", 2},
	Int32:      {"int32", 4},
	Uint32:     {"uint32", 4},
	Int64:      {"int64", 8},
	Uint64:     {"uint64", 8},
	Float16:    {"float16", 2},
	BFloat16:   {"bfloat16", 2},
	Float32:    {"float32", 4},
	Float64:    {"float64", 8},
	Complex64:  {"complex64", 8},
	Complex128: {"complex128", 16},
}

// Valid reports whether d is a known element type.
func (d DType) Valid() bool { return d > Invalid && d < numDTypes }

// Size is the size of one element in bytes (0 for an invalid code).
func (d DType) Size() int {
	if d >= numDTypes {
		return 0
	}
	return dtypeInfo[d].size
}

// String is the Go-like name of the type ("float32", "bfloat16").
func (d DType) String() string {
	if d >= numDTypes {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}
