package main

import (
	"bytes"
	"testing"
)

// TestEVEXEncoding checks the encoder against the Intel SDM's encodings
// (VDPBF16PS: EVEX.512.F3.0F38.W0 52 /r; VCVTNE2PS2BF16:
// EVEX.512.F2.0F38.W0 72 /r), as GNU as 2.40 assembles them, for register
// choices exercising every extension bit (R, R', X, B, V').
func TestEVEXEncoding(t *testing.T) {
	for _, c := range []struct {
		asm  string // AT&T order: src2, src1, dst
		got  []byte
		want []byte
	}{
		{"vdpbf16ps %zmm3,%zmm2,%zmm1", vdpbf16ps(1, 2, 3), []byte{0x62, 0xf2, 0x6e, 0x48, 0x52, 0xcb}},
		{"vdpbf16ps %zmm28,%zmm30,%zmm0", vdpbf16ps(0, 30, 28), []byte{0x62, 0x92, 0x0e, 0x40, 0x52, 0xc4}},
		{"vdpbf16ps %zmm29,%zmm31,%zmm27", vdpbf16ps(27, 31, 29), []byte{0x62, 0x02, 0x06, 0x40, 0x52, 0xdd}},
		{"vdpbf16ps %zmm9,%zmm17,%zmm12", vdpbf16ps(12, 17, 9), []byte{0x62, 0x52, 0x76, 0x40, 0x52, 0xe1}},
		{"vdpbf16ps %zmm0,%zmm0,%zmm31", vdpbf16ps(31, 0, 0), []byte{0x62, 0x62, 0x7e, 0x48, 0x52, 0xf8}},
		{"vcvtne2ps2bf16 %zmm0,%zmm1,%zmm2", vcvtne2ps2bf16(2, 1, 0), []byte{0x62, 0xf2, 0x77, 0x48, 0x72, 0xd0}},
		{"vcvtne2ps2bf16 %zmm17,%zmm8,%zmm25", vcvtne2ps2bf16(25, 8, 17), []byte{0x62, 0x22, 0x3f, 0x48, 0x72, 0xc9}},
		{"vcvtne2ps2bf16 %zmm31,%zmm31,%zmm31", vcvtne2ps2bf16(31, 31, 31), []byte{0x62, 0x02, 0x07, 0x40, 0x72, 0xff}},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s: encoded % x, want % x", c.asm, c.got, c.want)
		}
	}
}
