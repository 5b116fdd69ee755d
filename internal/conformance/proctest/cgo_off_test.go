//go:build !cgo

package proctest_test

// cgoOn: without cgo the nccl backend cannot load CUDA or NCCL.
const cgoOn = false
