package ddp

import "math"

// Conversions between float32 and the two 16-bit float formats the
// compression hooks put on the wire. Both round to nearest, ties to even,
// as PyTorch's Tensor.half() and Tensor.bfloat16() do; NaN stays NaN and
// values beyond the format's range become ±Inf.

// toBF16 rounds f to bfloat16 (the top 16 bits of a float32).
func toBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return uint16(b>>16) | 0x0040
	}
	// Add half an ulp of the result, plus one if the kept part is odd
	// (ties to even); a carry into the exponent is the correct rounding.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// fromBF16 widens a bfloat16 exactly.
func fromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// toFP16 rounds f to IEEE 754 binary16.
func toFP16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp > 127+15: // |f| ≥ 65536: beyond the largest finite half
		return sign | 0x7c00
	case exp >= 127-14: // normal half (or rounds up to Inf)
		// 13 mantissa bits are dropped; round to nearest even.
		h := uint32(exp-127+15)<<10 | mant>>13
		rest := mant & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
			h++ // a carry into the exponent is correct, up to Inf (0x7c00)
		}
		return sign | uint16(h)
	case exp >= 127-25: // subnormal half, or rounds to the smallest one
		// value = m·2^(exp−150) with the implicit leading 1 in m; a half
		// subnormal unit is 2^−24, so the half mantissa is
		// m·2^(exp−126) = m >> (126−exp), 14 ≤ shift ≤ 24.
		m := mant | 0x800000
		shift := uint(126 - exp)
		h := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	default: // rounds to ±0
		return sign
	}
}

// fromFP16 widens a binary16 exactly.
func fromFP16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	default: // subnormal: mant·2^−24, exact in float32
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
}
