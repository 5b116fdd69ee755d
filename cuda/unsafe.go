package cuda

import "unsafe"

// The package's only uses of unsafe outside the C layer: viewing a []T of
// any element type as bytes and back. Elem types hold no pointers, so the
// views are sound.

// elemSize is the size of one T in bytes.
func elemSize[T Elem]() int64 {
	var z T
	return int64(unsafe.Sizeof(z))
}

// asBytes views s as bytes; nil when s is empty.
func asBytes[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), int64(len(s))*elemSize[T]())
}

// asElems views the first n elements' worth of b as []T; nil when n is 0.
// b must be aligned for T (page-locked memory is page aligned).
func asElems[T Elem](b []byte, n int64) []T {
	if n == 0 || len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// hostAddr is the address of b's first byte (0 for an empty b).
func hostAddr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
