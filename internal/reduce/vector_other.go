//go:build !amd64

package reduce

import "github.com/courier-mp/courier/backend"

// vectors is whether vector kernels run: none outside amd64.
var vectors = false

// vector combines nothing here: the scalar code does it all.
func vector(dst, a, b backend.Buffer, op backend.ReduceOp) int64 { return 0 }
