//go:build courier_nccl_wip

package proctest_test

// The nccl backend, linked into this test binary so that a job started
// with COURIER_BACKEND=nccl runs the suite on it (docs/gpu.md).
import _ "github.com/courier-mp/courier/backend/nccl"
