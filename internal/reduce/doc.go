// Package reduce holds courier's reduction kernels: element-by-element
// Sum, Prod, Min and Max over every element type of the backend contract,
// on host memory. Package mp's collectives over point-to-point messages
// and the shared-memory collectives of backend/shm combine with the same
// code, so both give the same bits for the same operands.
//
// Float16 and BFloat16 are combined in float32 and each result is rounded
// to nearest, ties to even. Integers wrap around; Min and Max of a NaN are
// NaN. Nothing here allocates.
//
// It imports only the contract (backend), for its element types and
// operators, so a transport may use it.
//
// Files:
//
//	combine.go        Combine and the typed kernels
//	half.go           Float16 and BFloat16 to and from float32
//	vector_amd64.go   the AVX2 kernels' table (vector_amd64.s), used where the CPU has them
//	vector_other.go   no vector kernels elsewhere
package reduce
