package mp

import (
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

// view is host buffer b as a slice of T.
func view[T any](b backend.Buffer) []T {
	return unsafe.Slice((*T)(b.Ptr), b.Count)
}
