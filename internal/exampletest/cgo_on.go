//go:build cgo

package exampletest

// cgoOn: the ranks (this binary) can load CUDA and NCCL, so the fake GPU
// can stand in for them.
const cgoOn = true
