package mp

import (
	"math"
	"testing"
)

// TestHalfRoundTrip: every Float16 and BFloat16 that is not a NaN comes
// back from float32 with the same bits, and every NaN stays a NaN.
func TestHalfRoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		f16, bf16 := Float16(h), BFloat16(h)
		if f := f16.Float32(); f != f {
			if g := Float16Of(f).Float32(); g == g {
				t.Fatalf("Float16 %#04x: a NaN came back as %v", h, g)
			}
		} else if got := Float16Of(f); got != f16 {
			t.Fatalf("Float16 %#04x → %v → %#04x", h, f, uint16(got))
		}
		if f := bf16.Float32(); f != f {
			if g := BFloat16Of(f).Float32(); g == g {
				t.Fatalf("BFloat16 %#04x: a NaN came back as %v", h, g)
			}
		} else if got := BFloat16Of(f); got != bf16 {
			t.Fatalf("BFloat16 %#04x → %v → %#04x", h, f, uint16(got))
		}
	}
}

// TestFloat16Rounding: between every two neighbouring finite positive
// halves a < b, the midpoint rounds to the one with an even last bit, and
// the float32s just below and above it to a and b; past the largest half
// (65504) values round to infinity from 65520 on, as IEEE 754 says.
func TestFloat16Rounding(t *testing.T) {
	for h := uint16(0); h < 0x7bff; h++ {
		a, b := Float16(h), Float16(h+1)
		mid := (a.Float32() + b.Float32()) / 2 // exact: a half has 11 significant bits
		even := a
		if h&1 == 1 {
			even = b
		}
		if got := Float16Of(mid); got != even {
			t.Fatalf("midpoint %v of %#04x and %#04x rounded to %#04x, want %#04x", mid, h, h+1, uint16(got), uint16(even))
		}
		if got := Float16Of(math.Nextafter32(mid, 0)); got != a {
			t.Fatalf("just below %v rounded to %#04x, want %#04x", mid, uint16(got), h)
		}
		if got := Float16Of(math.Nextafter32(mid, 1e9)); got != b {
			t.Fatalf("just above %v rounded to %#04x, want %#04x", mid, uint16(got), h+1)
		}
		if got := Float16Of(-mid); got != even|0x8000 {
			t.Fatalf("-%v rounded to %#04x, want %#04x", mid, uint16(got), uint16(even|0x8000))
		}
	}
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{65504, 0x7bff}, {65519.99, 0x7bff}, {65520, 0x7c00}, {1e10, 0x7c00}, {-1e10, 0xfc00},
		{float32(math.Inf(1)), 0x7c00}, {1.0 / (1 << 25), 0}, {1.0/(1<<25) + 1.0/(1<<30), 1}, {5.960464477539063e-08, 1},
		{1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800},
	} {
		if got := Float16Of(c.f); uint16(got) != c.want {
			t.Errorf("Float16Of(%v) = %#04x, want %#04x", c.f, uint16(got), c.want)
		}
	}
}

// TestBFloat16Rounding: a float32 halfway between two bfloat16s goes to
// the even one.
func TestBFloat16Rounding(t *testing.T) {
	for _, c := range []struct {
		bits uint32
		want uint16
	}{
		{0x3f808000, 0x3f80}, // 1 + 2^-8: halfway, to the even 1.0
		{0x3f818000, 0x3f82}, // halfway, to the even above
		{0x3f808001, 0x3f81}, // just above halfway
		{0x7f7fffff, 0x7f80}, // the largest float32 rounds to infinity
	} {
		if got := BFloat16Of(math.Float32frombits(c.bits)); uint16(got) != c.want {
			t.Errorf("BFloat16Of(%#08x) = %#04x, want %#04x", c.bits, uint16(got), c.want)
		}
	}
}
