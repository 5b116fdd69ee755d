package reduce

import "math"

// F16To32 widens an IEEE 754 half to float32 (exactly).
func F16To32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0: // zero or subnormal: man × 2^-24
		f := float32(man) / (1 << 24)
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// F32To16 rounds a float32 to the nearest IEEE 754 half, ties to even;
// too large a value becomes infinity, a NaN a quiet NaN.
func F32To16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // the half's biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e >= 1 { // normal: drop 13 bits, rounding (a carry may reach infinity, rightly)
		h := uint32(e)<<10 | man>>13
		if rem := man & 0x1fff; rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	// Subnormal half: m × 2^-24, with m = (1.man × 2^(exp−127)) × 2^24.
	shift := uint32(14 - e)
	if shift > 24 {
		return sign
	}
	full := man | 0x800000
	m := full >> shift
	half := uint32(1) << (shift - 1)
	if rem := full & (1<<shift - 1); rem > half || rem == half && m&1 == 1 {
		m++
	}
	return sign | uint16(m)
}

// BF16To32 widens a bfloat16 to float32 (exactly).
func BF16To32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds a float32 to the nearest bfloat16, ties to even; a NaN
// stays a (quiet) NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
