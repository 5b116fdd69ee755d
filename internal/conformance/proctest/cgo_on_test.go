//go:build cgo

package proctest_test

// cgoOn: the rank processes can load CUDA and NCCL (the nccl backend
// needs cgo), so the nccl-ipc form of the suite can run.
const cgoOn = true
