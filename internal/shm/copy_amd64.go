package shm

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func copyStream(dst, src *byte, n uintptr)

var haveStream = cpu.X86.HasAVX2

// CanStream reports whether CopyStream uses non-temporal stores here.
func CanStream() bool { return haveStream }

func cpuVendor() (ebx, edx, ecx uint32)

// intel is whether CPUID names the vendor GenuineIntel.
var intel = func() bool {
	b, d, c := cpuVendor()
	var name [12]byte
	for i, w := range [3]uint32{b, d, c} {
		for k := range 4 {
			name[4*i+k] = byte(w >> (8 * k))
		}
	}
	return string(name[:]) == "GenuineIntel"
}()

// IntelCPU reports whether this is an Intel processor.
func IntelCPU() bool { return intel }

// CopyStream copies src into dst as copy does, for a large copy whose
// destination will not be read soon (a large message's receive buffer):
// where the CPU has AVX2 the bulk goes with non-temporal stores, which
// write the destination's cache lines whole without reading them first
// and leave this core's cache to the data still to come. The copy is
// complete, and ordered before the caller's later stores, when it
// returns. It returns the number of bytes copied, min(len(dst), len(src)).
func CopyStream(dst, src []byte) int {
	n := min(len(dst), len(src))
	if !haveStream || n < 4096 {
		return copy(dst, src[:n])
	}
	d := unsafe.Pointer(unsafe.SliceData(dst))
	head := int(-uintptr(d) & 31)
	copy(dst[:head], src[:head])
	body := (n - head) &^ 127
	copyStream(&dst[head], &src[head], uintptr(body))
	copy(dst[head+body:n], src[head+body:n])
	return n
}

//go:noescape
func prefetch(p *byte)

// Prefetch asks the processor to fetch the cache line holding *p ahead of
// a read: a reader that will poll a line another process wrote some time
// ago (the next record, the next head) overlaps that line's miss with its
// work on the current one. A hint: it never faults and changes nothing the
// program can see.
func Prefetch(p *byte) { prefetch(p) }

//go:noescape
func prefetchWrite(p *byte)

// PrefetchWrite asks the processor to take the cache line holding *p
// ahead of a store: a writer that will publish into a line its reader
// read some time ago (a head it reuses) overlaps taking the line back with
// its work on the current one, and its atomic store later does not wait
// for it. A hint: it never faults and changes nothing the program can see.
func PrefetchWrite(p *byte) { prefetchWrite(p) }

// haveReleaseStore: storeRelease is an ordinary store here.
const haveReleaseStore = true

//go:noescape
func storeRelease(w *atomic.Uint64, v uint64)
