package collective

import (
	"math"
	"testing"
)

// TestHalfConversions checks the 16-bit conversions against values worked
// out by hand from the formats' definitions.
func TestHalfConversions(t *testing.T) {
	fp16 := []struct {
		name string
		f    float32
		h    uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"max", 65504, 0x7bff},
		{"overflow", 65520, 0x7c00}, // halfway to 2^16 rounds to even: infinity
		{"just below overflow", 65519, 0x7bff},
		{"smallest normal", 1.0 / (1 << 14), 0x0400},
		{"smallest subnormal", 1.0 / (1 << 24), 0x0001},
		{"half of smallest subnormal", 1.0 / (1 << 25), 0x0000}, // ties to even: 0
		{"three halves of smallest subnormal", 1.5 / (1 << 24), 0x0002},
		{"one third", 1.0 / 3, 0x3555},
		{"1+2^-11 ties to even", 1 + 1.0/(1<<11), 0x3c00},
		{"1+3·2^-11 ties to even", 1 + 3.0/(1<<11), 0x3c02},
		{"inf", float32(math.Inf(1)), 0x7c00},
		{"-inf", float32(math.Inf(-1)), 0xfc00},
	}
	for _, tc := range fp16 {
		t.Run("fp16/"+tc.name, func(t *testing.T) {
			if got := FP16FromFloat32(tc.f); got != tc.h {
				t.Errorf("FP16FromFloat32(%g) = %#04x, want %#04x", tc.f, got, tc.h)
			}
			if tc.name == "overflow" || tc.name == "just below overflow" || tc.name == "one third" ||
				tc.name == "half of smallest subnormal" || tc.name == "three halves of smallest subnormal" ||
				tc.name == "1+2^-11 ties to even" || tc.name == "1+3·2^-11 ties to even" {
				return // not exactly representable
			}
			if got := FP16ToFloat32(tc.h); got != tc.f || math.Signbit(float64(got)) != math.Signbit(float64(tc.f)) {
				t.Errorf("FP16ToFloat32(%#04x) = %g, want %g", tc.h, got, tc.f)
			}
		})
	}
	if h := FP16FromFloat32(float32(math.NaN())); FP16ToFloat32(h) == FP16ToFloat32(h) {
		t.Errorf("NaN became %#04x", h)
	}
	bf16 := []struct {
		name string
		f    float32
		h    uint16
	}{
		{"one", 1, 0x3f80},
		{"minus three", -3, 0xc040},
		{"1+2^-8 ties to even", 1 + 1.0/256, 0x3f80},
		{"1+3·2^-8 ties to even", 1 + 3.0/256, 0x3f82},
		{"inf", float32(math.Inf(1)), 0x7f80},
	}
	for _, tc := range bf16 {
		t.Run("bf16/"+tc.name, func(t *testing.T) {
			if got := BF16FromFloat32(tc.f); got != tc.h {
				t.Errorf("BF16FromFloat32(%g) = %#04x, want %#04x", tc.f, got, tc.h)
			}
		})
	}
	if h := BF16FromFloat32(float32(math.NaN())); BF16ToFloat32(h) == BF16ToFloat32(h) {
		t.Errorf("NaN became %#04x", h)
	}
	// Every fp16 value survives the round trip through float32.
	for h := range 1 << 16 {
		f := FP16ToFloat32(uint16(h))
		if f != f {
			continue
		}
		if back := FP16FromFloat32(f); back != uint16(h) {
			t.Fatalf("fp16 %#04x → %g → %#04x", h, f, back)
		}
	}
}
