//go:build cgo

package nccl

import "testing"

// TestFakeGPUChildCombineKernels: the fake GPU's C twins of the
// combining kernels (testdata/fakegpu.c) compute what internal/reduce
// computes, as the kernels do on a GPU (TestGPUCombineKernels): so the
// tests of the collectives of device buffers on the fake GPU check the
// host's bits. Its modules hold only the kernels the PTX declares.
func TestFakeGPUChildCombineKernels(t *testing.T) {
	fakeGPUChild(t)
	checkCombineKernels(t, 0, 5000)
}
