package shm

import (
	"bytes"
	"fmt"
	"testing"
)

// TestCopyStream copies every size from 0 to a few lines past the
// non-temporal threshold, at every alignment of both ends, and checks the
// destination's bytes, and the bytes around it untouched.
func TestCopyStream(t *testing.T) {
	src := randomBytes(11, 20000)
	dst := make([]byte, 20000+256)
	sizes := []int{0, 1, 31, 127, 4095, 4096, 4097, 4096 + 127, 4096 + 128, 8191, 10000, 16384, 19000}
	for _, n := range sizes {
		for _, so := range []int{0, 1, 8, 31, 32, 63} {
			for _, do := range []int{0, 1, 8, 16, 31, 32, 63} {
				for i := range dst {
					dst[i] = 0xa5
				}
				got := CopyStream(dst[64+do:64+do+n], src[so:so+n])
				if got != n {
					t.Fatalf("n=%d: copied %d", n, got)
				}
				if !bytes.Equal(dst[64+do:64+do+n], src[so:so+n]) {
					t.Fatalf("n=%d src+%d dst+%d: bytes differ", n, so, do)
				}
				for i, b := range dst {
					if (i < 64+do || i >= 64+do+n) && b != 0xa5 {
						t.Fatalf("n=%d src+%d dst+%d: byte %d outside the destination written", n, so, do, i)
					}
				}
			}
		}
	}
	// Shorter of the two, as copy.
	if n := CopyStream(dst[:5000], src[:4500]); n != 4500 {
		t.Errorf("copied %d, want 4500", n)
	}
	if n := CopyStream(dst[:4500], src[:5000]); n != 4500 {
		t.Errorf("copied %d, want 4500", n)
	}
}

func BenchmarkCopyStream(b *testing.B) {
	src, dst := randomBytes(7, 64<<20), randomBytes(8, 64<<20)
	for _, fn := range []struct {
		name string
		f    func(d, s []byte) int
	}{{"copy", func(d, s []byte) int { return copy(d, s) }}, {"stream", CopyStream}} {
		for _, sz := range []int{64 << 10, 1 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", fn.name, sz>>10), func(b *testing.B) {
				b.SetBytes(int64(sz))
				off := 0
				for b.Loop() {
					if off+sz > len(dst) {
						off = 0
					}
					fn.f(dst[off:off+sz], src[off:off+sz])
					off += sz
				}
			})
		}
	}
}
