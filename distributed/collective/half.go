package collective

import "math"

// Conversions between float32 and the 16-bit payloads of BFloat16 and
// Float16 buffers (raw uint16 values). Reductions of 16-bit types compute
// in float32 and round back with these.

// BF16ToFloat32 widens a bfloat16 (the top half of a float32); exact.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// BF16FromFloat32 rounds a float32 to bfloat16, to nearest even, keeping
// NaNs NaN.
func BF16FromFloat32(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// FP16ToFloat32 widens an IEEE 754 binary16; exact.
func FP16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: value = man · 2^-24.
	f := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// FP16FromFloat32 rounds a float32 to IEEE 754 binary16, to nearest even,
// with overflow to infinity, gradual underflow and NaNs kept NaN.
func FP16FromFloat32(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	man := u & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	switch {
	case e >= 0x1f:
		return sign | 0x7c00
	case e <= 0:
		if e < -10 {
			return sign // rounds to zero
		}
		m := man | 0x800000 // implicit bit
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := m & (1<<shift - 1)
		q := m >> shift
		if rest > half || (rest == half && q&1 == 1) {
			q++
		}
		return sign | uint16(q) // q may carry into the smallest normal: still correct
	}
	q := uint32(e)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && q&1 == 1) {
		q++ // may carry into the exponent, up to infinity: correct
	}
	return sign | uint16(q)
}
