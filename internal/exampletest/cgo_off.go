//go:build !cgo

package exampletest

// cgoOn: without cgo no rank can load CUDA or NCCL, fake or real.
const cgoOn = false
