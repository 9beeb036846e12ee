package main

import (
	"fmt"
	"strings"
)

// ---------------------------------------------------------------------------
// bfloat16: AVX512-BF16 micro-kernel and conversions
//
// Go's assembler has no AVX512-BF16 mnemonics, so VDPBF16PS and
// VCVTNE2PS2BF16 are encoded here (evex512) and emitted as BYTE
// directives; bf16_test.go checks the encoder against the Intel SDM's
// encodings (as GNU as produces them) for several register choices.

// EVEX prefix fields for the two instructions, both EVEX.512.0F38.W0
// with register operands only:
//
//	VDPBF16PS      zmm1, zmm2, zmm3   EVEX.512.F3.0F38.W0 52 /r
//	VCVTNE2PS2BF16 zmm1, zmm2, zmm3   EVEX.512.F2.0F38.W0 72 /r
const (
	ppF3 = 2
	ppF2 = 3
)

// evex512 encodes a 512-bit EVEX instruction of map 0F38, W0, no masking,
// in its all-register form: dst in ModRM.reg (extended by EVEX.R and R'),
// src1 in EVEX.vvvv (extended by V'), src2 in ModRM.rm (extended by
// EVEX.B and X). Register numbers are 0-31.
func evex512(pp, opcode byte, dst, src1, src2 int) []byte {
	for _, r := range []int{dst, src1, src2} {
		if r < 0 || r > 31 {
			panic(fmt.Sprintf("asmgen: zmm register %d out of range", r))
		}
	}
	inv := func(r, bit int) byte { // the inverted bit of r, as EVEX stores it
		return byte(^r>>bit) & 1
	}
	p0 := inv(dst, 3)<<7 | inv(src2, 4)<<6 | inv(src2, 3)<<5 | inv(dst, 4)<<4 | 0b10 // mm = 0F38
	p1 := byte(^src1&15)<<3 | 1<<2 | pp                                              // W0, vvvv, 1, pp
	p2 := byte(0b10)<<5 | inv(src1, 4)<<3                                            // z=0, L'L = 512, b=0, V', aaa=0
	modrm := 0xc0 | byte(dst&7)<<3 | byte(src2&7)
	return []byte{0x62, p0, p1, p2, opcode, modrm}
}

// vdpbf16ps encodes VDPBF16PS zmm(acc), zmm(src1), zmm(src2): for each of
// the 16 lanes, acc += src1.bf16[2i]·src2.bf16[2i] + src1.bf16[2i+1]·src2.bf16[2i+1].
func vdpbf16ps(acc, src1, src2 int) []byte { return evex512(ppF3, 0x52, acc, src1, src2) }

// vcvtne2ps2bf16 encodes VCVTNE2PS2BF16 zmm(dst), zmm(hi), zmm(lo): the 16
// floats of lo rounded to bf16 in dst's low 256 bits, those of hi in its
// high 256 bits.
func vcvtne2ps2bf16(dst, hi, lo int) []byte { return evex512(ppF2, 0x72, dst, hi, lo) }

// raw emits encoded bytes as one line of BYTE directives, with the
// instruction as a comment.
func (e *emitter) raw(code []byte, comment string) {
	parts := make([]string, len(code))
	for i, b := range code {
		parts[i] = fmt.Sprintf("BYTE $0x%02x", b)
	}
	e.i("%s // %s", strings.Join(parts, "; "), comment)
}

func genBF16(e *emitter) {
	genKernelBF16(e, 14, 2)
	genCvtF32BF16(e, true)
	genCvtF32BF16(e, false)
	genCvtBF16F32(e)
	genPackPairs(e)
	genCvtAVX2(e)
}

// genCvtAVX2 emits the AVX2 conversions, with the contracts of the
// AVX-512 ones (n a multiple of 16), for CPUs without AVX-512:
//
// func f32ToBF16AVX2(dst *uint16, src *float32, n int)
// func bf16ToF32AVX2(dst *float32, src *uint16, n int)
//
// The rounding is emitRoundBF16's, eight lanes a register: NaN lanes
// found by a signed compare of |x| with +Inf (|x| is non-negative as a
// signed integer), and the two halves packed to words with VPACKUSDW
// (each value fits in 16 bits, so nothing saturates) and put back in
// order with VPERMQ.
func genCvtAVX2(e *emitter) {
	name := "f32ToBF16AVX2"
	e.cvtStart(name, "dst *uint16, src *float32, n int", 4)
	for i, v := range []uint32{1, 0x7fff, 0x7fffffff, 0x7f800000, 0x40} {
		e.i("MOVL $0x%x, AX", v)
		e.i("MOVD AX, X%d", 10+i)
		e.i("VPBROADCASTD X%d, Y%d", 10+i, 10+i)
	}
	e.loopStart(name)
	for h := 0; h < 2; h++ {
		x, t, m := y(h), y(2+h), y(4+h)
		e.i("VMOVDQU %d(SI), %s", 32*h, x)
		e.i("VPSRLD $16, %s, %s", x, t)
		e.i("VPAND Y10, %s, %s", t, t)
		e.i("VPADDD Y11, %s, %s", t, t)
		e.i("VPADDD %s, %s, %s", x, t, t)
		e.i("VPSRLD $16, %s, %s", t, t)
		e.i("VPAND Y12, %s, %s", x, m)
		e.i("VPCMPGTD Y13, %s, %s", m, m) // |x| > +Inf: NaN
		e.i("VPSRLD $16, %s, Y8", x)
		e.i("VPOR Y14, Y8, Y8")
		e.i("VPBLENDVB %s, Y8, %s, %s", m, t, t)
	}
	e.i("VPACKUSDW Y3, Y2, Y2")
	e.i("VPERMQ $0xd8, Y2, Y2")
	e.i("VMOVDQU Y2, (DI)")
	e.loopEnd(name, "ADDQ $64, SI", "ADDQ $32, DI")

	genWiden(e, "bf16ToF32AVX2", y, 8, "VMOVDQU")
}

// cvtStart opens the conversion name(sig), whose arguments are dst, src
// and n: its comment and TEXT line, dst in DI, src in SI and n >> shift
// (the loop's count of blocks) in CX.
func (e *emitter) cvtStart(name, sig string, shift int) {
	e.fn(name, sig, 24)
	e.i("MOVQ dst+0(FP), DI")
	e.i("MOVQ src+8(FP), SI")
	e.i("MOVQ n+16(FP), CX")
	e.i("SHRQ $%d, CX", shift)
}

// loopStart opens name's loop over CX blocks (none when CX is 0).
func (e *emitter) loopStart(name string) {
	e.i("TESTQ CX, CX")
	e.i("JZ %s_end", name)
	e.l(name + "_loop")
}

// loopEnd closes the loop loopStart opened, each block advancing its
// pointers by the instructions advance, and returns.
func (e *emitter) loopEnd(name string, advance ...string) {
	for _, a := range advance {
		e.i("%s", a)
	}
	e.i("DECQ CX")
	e.i("JNZ %s_loop", name)
	e.l(name + "_end")
	e.i("VZEROUPPER")
	e.i("RET")
}

// genWiden emits the exact widening name(dst *float32, src *uint16, n
// int) of n bf16 values (n a multiple of 2·lanes) on registers reg(0) and
// reg(1) of lanes floats, each word shifted into the top half of a float
// and stored with store.
func genWiden(e *emitter, name string, reg func(int) string, lanes int, store string) {
	e.cvtStart(name, "dst *float32, src *uint16, n int", log2(2*lanes))
	e.loopStart(name)
	e.i("VPMOVZXWD (SI), %s", reg(0))
	e.i("VPMOVZXWD %d(SI), %s", 2*lanes, reg(1))
	e.i("VPSLLD $16, %s, %s", reg(0), reg(0))
	e.i("VPSLLD $16, %s, %s", reg(1), reg(1))
	e.i("%s %s, (DI)", store, reg(0))
	e.i("%s %s, %d(DI)", store, reg(1), 4*lanes)
	e.loopEnd(name, fmt.Sprintf("ADDQ $%d, SI", 4*lanes), fmt.Sprintf("ADDQ $%d, DI", 8*lanes))
}

// genPackPairs emits the packer of bfloat16 slivers that run along the
// source's columns (B not transposed, A transposed): it interleaves rows
// 2q and 2q+1 into words,
//
//	dst[q*width + c] = src[2q*ld + c] | src[(2q+1)*ld + c]<<16   for q < k2, c < width
//
// reading only the columns whose loadMask bit is set (the others are
// zero) and writing only the columns whose storeMask bit is set (width ≤
// 32, its low bits). dstStep is 4·width, the bytes of one pair's group.
//
// func packPairs(dst *uint32, src *uint16, ld, k2 int, loadMask, storeMask uint32, dstStep int)
func genPackPairs(e *emitter) {
	const name = "packPairs"
	e.fn(name, "dst *uint32, src *uint16, ld, k2 int, loadMask, storeMask uint32, dstStep int", 48)
	e.i("MOVQ dst+0(FP), DI")
	e.i("MOVQ src+8(FP), SI")
	e.i("MOVQ ld+16(FP), BX")
	e.i("SHLQ $1, BX")
	e.i("MOVQ k2+24(FP), CX")
	e.masks32("loadMask+32(FP)", "storeMask+36(FP)")
	e.i("MOVQ dstStep+40(FP), R8")
	e.loopStart(name)
	for v := 0; v < 2; v++ {
		e.i("VPMOVZXWD.Z %d(SI), K%d, %s", 32*v, 1+v, z(2*v))
		e.i("VPMOVZXWD.Z %d(SI)(BX*1), K%d, %s", 32*v, 1+v, z(2*v+1))
		e.i("VPSLLD $16, %s, %s", z(2*v+1), z(2*v+1))
		e.i("VPORD %s, %s, %s", z(2*v), z(2*v+1), z(2*v))
		e.i("VMOVDQU32 %s, K%d, %d(DI)", z(2*v), 3+v, 64*v)
	}
	e.loopEnd(name, "LEAQ (SI)(BX*2), SI", "ADDQ R8, DI")
}

// genKernelBF16 emits the AVX512-BF16 micro-kernel for an mr×(16·nv) tile
// of C from bf16 slivers packed by pairs of k:
//
//	A sliver: k2 groups of mr 32-bit words, word (q, r) = A[r][2q] | A[r][2q+1]<<16
//	B sliver: k2 groups of 16·nv words,    word (q, j) = B[2q][j] | B[2q+1][j]<<16
//	C[r][j] = alpha·Σ_q (A[r][2q]·B[2q][j] + A[r][2q+1]·B[2q+1][j]) + beta·C[r][j]
//
// for r < rows and nmask bit j set, accumulated in float32 by VDPBF16PS
// (one per row and B vector and pair of k: the A word broadcast to all
// lanes, B's words lane by lane).
//
// func name(k2 int, a, b *uint32, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64)
//
// When beta is ±0, C is not read. Rows at or beyond rows and columns whose
// mask bit is clear are neither read nor written. The frame is the packed
// float32 kernel's (genKernel512).
func genKernelBF16(e *emitter, mr, nv int) {
	const unroll = 4
	name := fmt.Sprintf("kernelBF16x%dx%d", mr, 16*nv)
	const offAlpha, offBeta, offMask = 40, 44, 56
	nacc := mr * nv
	if nacc+nv+2 > 32 {
		panic("asmgen: not enough zmm registers")
	}
	breg := func(v int) int { return nacc + v }
	bc := func(r int) int { return nacc + nv + r%2 }
	acc := func(r, v int) int { return r*nv + v }
	e.fn(name, "k2 int, a, b *uint32, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64", 64)
	e.args("k2", false, 16, 24, 32, 48)
	offs := make([]int, nv)
	for v := range offs {
		offs[v] = 64 * v
	}
	e.prefetchC(mr, offs...)
	e.zero512(nacc)
	aStep, bStep := mr*4, nv*64 // bytes per pair of k
	step := func(ao, bo int) {
		for v := 0; v < nv; v++ {
			e.i("VMOVDQU32 %d(BX), %s", bo+64*v, z(breg(v)))
		}
		for r := 0; r < mr; r++ {
			e.i("VPBROADCASTD %d(AX), %s", ao+4*r, z(bc(r)))
			for v := 0; v < nv; v++ {
				e.raw(vdpbf16ps(acc(r, v), bc(r), breg(v)),
					fmt.Sprintf("VDPBF16PS %s, %s, %s", z(breg(v)), z(bc(r)), z(acc(r, v))))
			}
		}
	}
	e.unrolled(name, unroll, "store", func() {
		for u := 0; u < unroll; u++ {
			step(u*aStep, u*bStep)
			e.i("PREFETCHT0 %d(AX)", 1024+64*u)
		}
		e.i("ADDQ $%d, AX", unroll*aStep)
		e.i("ADDQ $%d, BX", unroll*bStep)
	}, func() {
		step(0, 0)
		e.i("ADDQ $%d, AX", aStep)
		e.i("ADDQ $%d, BX", bStep)
	})
	zreg := func(f func(int) int) func(int) string { return func(i int) string { return z(f(i)) } }
	e.store512(mr, nv, func(r, v int) string { return z(acc(r, v)) }, zreg(breg), zreg(bc), offAlpha, offBeta, offMask, false)
}

// emitRoundBF16 emits the integer round-to-nearest-even of the 16 floats
// in zmm x to bf16, stored as 16 words at off(DI): t = (x + 0x7fff +
// (x>>16 & 1)) >> 16, and for NaN lanes (|x| > 0x7f800000, mask K1)
// x>>16 | 0x40, a quiet NaN keeping the sign and the payload's top bits.
// Constants: Z16 = 1, Z17 = 0x7fff, Z18 = 0x7fffffff, Z19 = 0x7f800000,
// Z20 = 0x40. Clobbers t and Z21.
func emitRoundBF16(e *emitter, x, t string, off int) {
	e.i("VPSRLD $16, %s, %s", x, t)
	e.i("VPANDD Z16, %s, %s", t, t)
	e.i("VPADDD Z17, %s, %s", t, t)
	e.i("VPADDD %s, %s, %s", x, t, t)
	e.i("VPSRLD $16, %s, %s", t, t)
	e.i("VPANDD Z18, %s, Z21", x)
	e.i("VPCMPUD $6, Z19, Z21, K1") // |x| > +Inf: NaN
	e.i("VPSRLD $16, %s, K1, %s", x, t)
	e.i("VPORD Z20, %s, K1, %s", t, t)
	e.i("VPMOVDW %s, %d(DI)", t, off)
}

// genCvtF32BF16 emits the conversion of n floats (n a multiple of 32) to
// bf16, rounding to nearest even, NaNs quieted (see emitRoundBF16):
//
// func f32ToBF16AVX512BF16(dst *uint16, src *float32, n int)
// func f32ToBF16AVX512(dst *uint16, src *float32, n int)
//
// The BF16 variant converts with VCVTNE2PS2BF16, which flushes subnormal
// inputs to zero; a group of 32 floats holding one is redone with the
// integer rounding of the other variant, so both give the same bits.
func genCvtF32BF16(e *emitter, hw bool) {
	name := "f32ToBF16AVX512"
	if hw {
		name += "BF16"
	}
	e.cvtStart(name, "dst *uint16, src *float32, n int", 5)
	for i, v := range []uint32{1, 0x7fff, 0x7fffffff, 0x7f800000, 0x40} {
		e.i("MOVL $0x%x, AX", v)
		e.i("VPBROADCASTD AX, %s", z(16+i))
	}
	if hw {
		e.i("MOVL $0x7fffff, AX") // subnormal: |x|-1 < 0x7fffff (unsigned)
		e.i("VPBROADCASTD AX, Z22")
	}
	e.loopStart(name)
	e.i("VMOVUPS (SI), Z0")
	e.i("VMOVUPS 64(SI), Z1")
	if hw {
		e.raw(vcvtne2ps2bf16(2, 1, 0), "VCVTNE2PS2BF16 Z0, Z1, Z2")
		for i, x := range []string{"Z0", "Z1"} {
			e.i("VPANDD Z18, %s, Z3", x)
			e.i("VPSUBD Z16, Z3, Z3")
			e.i("VPCMPUD $1, Z22, Z3, K%d", 2+i) // |x|-1 < 0x7fffff
		}
		e.i("KORTESTW K2, K3")
		e.i("JNZ %s_int", name)
		e.i("VMOVDQU32 Z2, (DI)")
		e.i("JMP %s_next", name)
		e.l(name + "_int")
	}
	emitRoundBF16(e, "Z0", "Z4", 0)
	emitRoundBF16(e, "Z1", "Z5", 32)
	if hw {
		e.l(name + "_next")
	}
	e.loopEnd(name, "ADDQ $128, SI", "ADDQ $64, DI")
}

// genCvtBF16F32 emits the exact widening of n bf16 values (n a multiple
// of 32) to float32: each word shifted into the top half of a float.
//
// func bf16ToF32AVX512(dst *float32, src *uint16, n int)
func genCvtBF16F32(e *emitter) { genWiden(e, "bf16ToF32AVX512", z, 16, "VMOVUPS") }
