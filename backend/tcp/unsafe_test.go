package tcp

import "unsafe"

func unsafePointer[E any](s []E) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }
