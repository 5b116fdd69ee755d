package cuda

import (
	"testing"
	"unsafe"
)

func TestSliceHeaderLayout(t *testing.T) {
	s := Slice[float64]{ptr: 0x1234, n: 77, dev: 1}
	h := (*SliceHeader)(unsafe.Pointer(&s))
	if h.Ptr != 0x1234 || h.Len != 77 || h.Device != 1 {
		t.Fatalf("SliceHeader reads %+v from %+v", *h, s)
	}
	if unsafe.Sizeof(s) != unsafe.Sizeof(SliceHeader{}) || unsafe.Sizeof(Slice[int8]{}) != unsafe.Sizeof(SliceHeader{}) {
		t.Fatal("Slice and SliceHeader differ in size")
	}
}
