#include "textflag.h"

// AVX2+FMA versions of the transcendental kernels in math.go; see there for
// the contracts and the error bounds. Every function here handles a length
// that is a multiple of 8 (the Go callers do the tail), one 8-lane vector
// per iteration: the iterations are independent, so the out-of-order core
// overlaps their long dependency chains.
//
// exp(x) follows Cephes' expf: n = round(x·log₂e), r = x − n·ln2 (ln2 split
// in two so n·ln2_hi is exact), exp(r) by a degree-7 polynomial on
// |r| ≤ ln2/2, times 2ⁿ built in the exponent bits. x is clamped to
// [−87.33654, 88] so 2ⁿ stays a normal number; x below −87.33654 gives +0.

DATA expHi<>+0(SB)/4, $0x42b00000
DATA expHi<>+4(SB)/4, $0x42b00000
DATA expHi<>+8(SB)/4, $0x42b00000
DATA expHi<>+12(SB)/4, $0x42b00000
DATA expHi<>+16(SB)/4, $0x42b00000
DATA expHi<>+20(SB)/4, $0x42b00000
DATA expHi<>+24(SB)/4, $0x42b00000
DATA expHi<>+28(SB)/4, $0x42b00000
GLOBL expHi<>(SB), RODATA|NOPTR, $32

DATA expLo<>+0(SB)/4, $0xc2aeac4f
DATA expLo<>+4(SB)/4, $0xc2aeac4f
DATA expLo<>+8(SB)/4, $0xc2aeac4f
DATA expLo<>+12(SB)/4, $0xc2aeac4f
DATA expLo<>+16(SB)/4, $0xc2aeac4f
DATA expLo<>+20(SB)/4, $0xc2aeac4f
DATA expLo<>+24(SB)/4, $0xc2aeac4f
DATA expLo<>+28(SB)/4, $0xc2aeac4f
GLOBL expLo<>(SB), RODATA|NOPTR, $32

DATA log2e<>+0(SB)/4, $0x3fb8aa3b
DATA log2e<>+4(SB)/4, $0x3fb8aa3b
DATA log2e<>+8(SB)/4, $0x3fb8aa3b
DATA log2e<>+12(SB)/4, $0x3fb8aa3b
DATA log2e<>+16(SB)/4, $0x3fb8aa3b
DATA log2e<>+20(SB)/4, $0x3fb8aa3b
DATA log2e<>+24(SB)/4, $0x3fb8aa3b
DATA log2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL log2e<>(SB), RODATA|NOPTR, $32

DATA expC1<>+0(SB)/4, $0x3f318000
DATA expC1<>+4(SB)/4, $0x3f318000
DATA expC1<>+8(SB)/4, $0x3f318000
DATA expC1<>+12(SB)/4, $0x3f318000
DATA expC1<>+16(SB)/4, $0x3f318000
DATA expC1<>+20(SB)/4, $0x3f318000
DATA expC1<>+24(SB)/4, $0x3f318000
DATA expC1<>+28(SB)/4, $0x3f318000
GLOBL expC1<>(SB), RODATA|NOPTR, $32

DATA expC2<>+0(SB)/4, $0xb95e8083
DATA expC2<>+4(SB)/4, $0xb95e8083
DATA expC2<>+8(SB)/4, $0xb95e8083
DATA expC2<>+12(SB)/4, $0xb95e8083
DATA expC2<>+16(SB)/4, $0xb95e8083
DATA expC2<>+20(SB)/4, $0xb95e8083
DATA expC2<>+24(SB)/4, $0xb95e8083
DATA expC2<>+28(SB)/4, $0xb95e8083
GLOBL expC2<>(SB), RODATA|NOPTR, $32

DATA expP0<>+0(SB)/4, $0x39506967
DATA expP0<>+4(SB)/4, $0x39506967
DATA expP0<>+8(SB)/4, $0x39506967
DATA expP0<>+12(SB)/4, $0x39506967
DATA expP0<>+16(SB)/4, $0x39506967
DATA expP0<>+20(SB)/4, $0x39506967
DATA expP0<>+24(SB)/4, $0x39506967
DATA expP0<>+28(SB)/4, $0x39506967
GLOBL expP0<>(SB), RODATA|NOPTR, $32

DATA expP1<>+0(SB)/4, $0x3ab743ce
DATA expP1<>+4(SB)/4, $0x3ab743ce
DATA expP1<>+8(SB)/4, $0x3ab743ce
DATA expP1<>+12(SB)/4, $0x3ab743ce
DATA expP1<>+16(SB)/4, $0x3ab743ce
DATA expP1<>+20(SB)/4, $0x3ab743ce
DATA expP1<>+24(SB)/4, $0x3ab743ce
DATA expP1<>+28(SB)/4, $0x3ab743ce
GLOBL expP1<>(SB), RODATA|NOPTR, $32

DATA expP2<>+0(SB)/4, $0x3c088908
DATA expP2<>+4(SB)/4, $0x3c088908
DATA expP2<>+8(SB)/4, $0x3c088908
DATA expP2<>+12(SB)/4, $0x3c088908
DATA expP2<>+16(SB)/4, $0x3c088908
DATA expP2<>+20(SB)/4, $0x3c088908
DATA expP2<>+24(SB)/4, $0x3c088908
DATA expP2<>+28(SB)/4, $0x3c088908
GLOBL expP2<>(SB), RODATA|NOPTR, $32

DATA expP3<>+0(SB)/4, $0x3d2aa9c1
DATA expP3<>+4(SB)/4, $0x3d2aa9c1
DATA expP3<>+8(SB)/4, $0x3d2aa9c1
DATA expP3<>+12(SB)/4, $0x3d2aa9c1
DATA expP3<>+16(SB)/4, $0x3d2aa9c1
DATA expP3<>+20(SB)/4, $0x3d2aa9c1
DATA expP3<>+24(SB)/4, $0x3d2aa9c1
DATA expP3<>+28(SB)/4, $0x3d2aa9c1
GLOBL expP3<>(SB), RODATA|NOPTR, $32

DATA expP4<>+0(SB)/4, $0x3e2aaaaa
DATA expP4<>+4(SB)/4, $0x3e2aaaaa
DATA expP4<>+8(SB)/4, $0x3e2aaaaa
DATA expP4<>+12(SB)/4, $0x3e2aaaaa
DATA expP4<>+16(SB)/4, $0x3e2aaaaa
DATA expP4<>+20(SB)/4, $0x3e2aaaaa
DATA expP4<>+24(SB)/4, $0x3e2aaaaa
DATA expP4<>+28(SB)/4, $0x3e2aaaaa
GLOBL expP4<>(SB), RODATA|NOPTR, $32

DATA expP5<>+0(SB)/4, $0x3f000000
DATA expP5<>+4(SB)/4, $0x3f000000
DATA expP5<>+8(SB)/4, $0x3f000000
DATA expP5<>+12(SB)/4, $0x3f000000
DATA expP5<>+16(SB)/4, $0x3f000000
DATA expP5<>+20(SB)/4, $0x3f000000
DATA expP5<>+24(SB)/4, $0x3f000000
DATA expP5<>+28(SB)/4, $0x3f000000
GLOBL expP5<>(SB), RODATA|NOPTR, $32

DATA one<>+0(SB)/4, $0x3f800000
DATA one<>+4(SB)/4, $0x3f800000
DATA one<>+8(SB)/4, $0x3f800000
DATA one<>+12(SB)/4, $0x3f800000
DATA one<>+16(SB)/4, $0x3f800000
DATA one<>+20(SB)/4, $0x3f800000
DATA one<>+24(SB)/4, $0x3f800000
DATA one<>+28(SB)/4, $0x3f800000
GLOBL one<>(SB), RODATA|NOPTR, $32

DATA geluA<>+0(SB)/4, $0xbfcc422a
DATA geluA<>+4(SB)/4, $0xbfcc422a
DATA geluA<>+8(SB)/4, $0xbfcc422a
DATA geluA<>+12(SB)/4, $0xbfcc422a
DATA geluA<>+16(SB)/4, $0xbfcc422a
DATA geluA<>+20(SB)/4, $0xbfcc422a
DATA geluA<>+24(SB)/4, $0xbfcc422a
DATA geluA<>+28(SB)/4, $0xbfcc422a
GLOBL geluA<>(SB), RODATA|NOPTR, $32

DATA geluB<>+0(SB)/4, $0xbd922279
DATA geluB<>+4(SB)/4, $0xbd922279
DATA geluB<>+8(SB)/4, $0xbd922279
DATA geluB<>+12(SB)/4, $0xbd922279
DATA geluB<>+16(SB)/4, $0xbd922279
DATA geluB<>+20(SB)/4, $0xbd922279
DATA geluB<>+24(SB)/4, $0xbd922279
DATA geluB<>+28(SB)/4, $0xbd922279
GLOBL geluB<>(SB), RODATA|NOPTR, $32

DATA geluD<>+0(SB)/4, $0x3e5b33b6
DATA geluD<>+4(SB)/4, $0x3e5b33b6
DATA geluD<>+8(SB)/4, $0x3e5b33b6
DATA geluD<>+12(SB)/4, $0x3e5b33b6
DATA geluD<>+16(SB)/4, $0x3e5b33b6
DATA geluD<>+20(SB)/4, $0x3e5b33b6
DATA geluD<>+24(SB)/4, $0x3e5b33b6
DATA geluD<>+28(SB)/4, $0x3e5b33b6
GLOBL geluD<>(SB), RODATA|NOPTR, $32

DATA bias127<>+0(SB)/4, $127
DATA bias127<>+4(SB)/4, $127
DATA bias127<>+8(SB)/4, $127
DATA bias127<>+12(SB)/4, $127
DATA bias127<>+16(SB)/4, $127
DATA bias127<>+20(SB)/4, $127
DATA bias127<>+24(SB)/4, $127
DATA bias127<>+28(SB)/4, $127
GLOBL bias127<>(SB), RODATA|NOPTR, $32

// EXP8 replaces Y0 by exp(Y0); it clobbers Y1–Y5. NaN stays NaN: VMAXPS and
// VMINPS return their second source (here x) when either is NaN.
#define EXP8 \
	VMOVUPS     expLo<>(SB), Y5; \
	VCMPPS      $1, Y5, Y0, Y4; \
	VMAXPS      Y0, Y5, Y0; \
	VMOVUPS     expHi<>(SB), Y5; \
	VMINPS      Y0, Y5, Y0; \
	VMULPS      log2e<>(SB), Y0, Y1; \
	VROUNDPS    $0, Y1, Y1; \
	VFNMADD231PS expC1<>(SB), Y1, Y0; \
	VFNMADD231PS expC2<>(SB), Y1, Y0; \
	VMOVUPS     expP0<>(SB), Y2; \
	VFMADD213PS expP1<>(SB), Y0, Y2; \
	VFMADD213PS expP2<>(SB), Y0, Y2; \
	VFMADD213PS expP3<>(SB), Y0, Y2; \
	VFMADD213PS expP4<>(SB), Y0, Y2; \
	VFMADD213PS expP5<>(SB), Y0, Y2; \
	VMULPS      Y0, Y0, Y3; \
	VFMADD213PS Y0, Y3, Y2; \
	VADDPS      one<>(SB), Y2, Y2; \
	VCVTPS2DQ   Y1, Y1; \
	VPADDD      bias127<>(SB), Y1, Y1; \
	VPSLLD      $23, Y1, Y1; \
	VMULPS      Y1, Y2, Y0; \
	VANDNPS     Y0, Y4, Y0

// HSUM8 leaves the sum of Y0's eight lanes in X0; it clobbers X1.
#define HSUM8 \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VMOVHLPS     X0, X1, X1; \
	VADDPS       X1, X0, X0; \
	VMOVSHDUP    X0, X1; \
	VADDSS       X1, X0, X0

// func expAVX2(dst, src *float32, n int)
TEXT ·expAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

exploop:
	CMPQ    CX, $8
	JLT     expdone
	VMOVUPS (SI), Y0
	EXP8
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     exploop

expdone:
	VZEROUPPER
	RET

// func expShiftSumAVX2(dst, src *float32, n int, scale, shift float32) float32
TEXT ·expShiftSumAVX2(SB), NOSPLIT, $0-36
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y14
	VBROADCASTSS shift+28(FP), Y13
	VXORPS       Y15, Y15, Y15

essloop:
	CMPQ        CX, $8
	JLT         essdone
	VMOVUPS     (SI), Y0
	VFMSUB213PS Y13, Y14, Y0
	EXP8
	VMOVUPS     Y0, (DI)
	VADDPS      Y0, Y15, Y15
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         essloop

essdone:
	VMOVAPS Y15, Y0
	HSUM8
	MOVSS   X0, ret+32(FP)
	VZEROUPPER
	RET

// GELU-tanh as x·σ(2u) with u = √(2/π)·(x + 0.044715·x³): 1 + tanh(u) =
// 2σ(2u), which has no cancellation for negative x. σ(2u) = 1/(1 + e),
// e = exp(−2u) = exp(x·(geluA + geluB·x²)).

// func geluTanhAVX2(dst, src *float32, n int)
TEXT ·geluTanhAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

geluloop:
	CMPQ        CX, $8
	JLT         geludone
	VMOVUPS     (SI), Y6
	VMULPS      Y6, Y6, Y1
	VMOVUPS     geluB<>(SB), Y0
	VFMADD213PS geluA<>(SB), Y1, Y0
	VMULPS      Y6, Y0, Y0
	EXP8
	VADDPS      one<>(SB), Y0, Y0
	VDIVPS      Y0, Y6, Y0
	VMOVUPS     Y0, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         geluloop

geludone:
	VZEROUPPER
	RET

// The derivative is s + x·s·(1−s)·u' with s = σ(2u), u' = d(2u)/dx =
// geluD·x² − geluA, and s·(1−s) = s·(e·s): e·s ≤ 1, so nothing
// overflows for large negative x.

// func geluTanhGradAVX2(dst, grad, x *float32, n int)
TEXT ·geluTanhGradAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ grad+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX

gradloop:
	CMPQ        CX, $8
	JLT         graddone
	VMOVUPS     (SI), Y6
	VMULPS      Y6, Y6, Y7
	VMOVUPS     geluB<>(SB), Y0
	VFMADD213PS geluA<>(SB), Y7, Y0
	VMULPS      Y6, Y0, Y0
	EXP8
	VMOVUPS     one<>(SB), Y8
	VADDPS      Y8, Y0, Y9
	VDIVPS      Y9, Y8, Y9
	VMULPS      Y9, Y0, Y0
	VMOVUPS     geluD<>(SB), Y10
	VFMSUB213PS geluA<>(SB), Y7, Y10
	VMULPS      Y6, Y10, Y10
	VMULPS      Y0, Y10, Y10
	VFMADD213PS Y9, Y9, Y10
	VMULPS      (DX), Y10, Y10
	VMOVUPS     Y10, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DX
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         gradloop

graddone:
	VZEROUPPER
	RET

// func maxAVX2(src *float32, n int) float32
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ    src+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Y0
	ADDQ    $32, SI
	SUBQ    $8, CX

maxloop:
	CMPQ    CX, $8
	JLT     maxdone
	VMAXPS  (SI), Y0, Y0
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     maxloop

maxdone:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VMOVHLPS     X0, X1, X1
	VMAXPS       X1, X0, X0
	VMOVSHDUP    X0, X1
	VMAXSS       X1, X0, X0
	MOVSS        X0, ret+16(FP)
	VZEROUPPER
	RET

// func dotAVX2(a, b *float32, n int) float32
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DX
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y2, Y2, Y2

dot16:
	CMPQ        CX, $16
	JLT         dot8
	VMOVUPS     (SI), Y1
	VFMADD231PS (DX), Y1, Y0
	VMOVUPS     32(SI), Y3
	VFMADD231PS 32(DX), Y3, Y2
	ADDQ        $64, SI
	ADDQ        $64, DX
	SUBQ        $16, CX
	JMP         dot16

dot8:
	CMPQ        CX, $8
	JLT         dotdone
	VMOVUPS     (SI), Y1
	VFMADD231PS (DX), Y1, Y0
	ADDQ        $32, SI
	ADDQ        $32, DX
	SUBQ        $8, CX
	JMP         dot8

dotdone:
	VADDPS Y2, Y0, Y0
	HSUM8
	MOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// func scaleAVX2(dst, src *float32, n int, a float32)
TEXT ·scaleAVX2(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS a+24(FP), Y14

scaleloop:
	CMPQ    CX, $8
	JLT     scaledone
	VMULPS  (SI), Y14, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     scaleloop

scaledone:
	VZEROUPPER
	RET

// LayerNorm rows: three passes over one row (it stays in L1) for the
// forward, two for the backward; see LayerNormRow and LayerNormGradRow.

// func layerNormRowAVX2(dst, src, w, b *float32, n int, invN, eps float32, stats *float32)
TEXT ·layerNormRowAVX2(SB), NOSPLIT, $0-56
	MOVQ   dst+0(FP), DI
	MOVQ   src+8(FP), SI
	MOVQ   w+16(FP), R8
	MOVQ   b+24(FP), R9
	MOVQ   n+32(FP), CX
	VXORPS Y0, Y0, Y0
	MOVQ   SI, AX
	MOVQ   CX, DX

lnsum:
	VADDPS (AX), Y0, Y0
	ADDQ   $32, AX
	SUBQ   $8, DX
	JNE    lnsum
	HSUM8
	VMULSS       invN+40(FP), X0, X0
	VMOVAPS      X0, X12
	VBROADCASTSS X0, Y8
	VXORPS       Y0, Y0, Y0
	MOVQ         SI, AX
	MOVQ         CX, DX

lnvar:
	VMOVUPS     (AX), Y1
	VSUBPS      Y8, Y1, Y1
	VFMADD231PS Y1, Y1, Y0
	ADDQ        $32, AX
	SUBQ        $8, DX
	JNE         lnvar
	HSUM8
	VMULSS       invN+40(FP), X0, X0
	VADDSS       eps+44(FP), X0, X0
	VSQRTSS      X0, X0, X0
	VMOVSS       one<>(SB), X1
	VDIVSS       X0, X1, X0
	VBROADCASTSS X0, Y9
	MOVQ         stats+48(FP), AX
	VMOVSS       X12, (AX)
	VMOVSS       X0, 4(AX)

lnapply:
	VMOVUPS     (SI), Y1
	VSUBPS      Y8, Y1, Y1
	VMULPS      Y9, Y1, Y1
	VMOVUPS     (R8), Y2
	VFMADD213PS (R9), Y2, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, R8
	ADDQ        $32, R9
	SUBQ        $8, CX
	JNE         lnapply
	VZEROUPPER
	RET

// func layerNormGradRowAVX2(dx, grad, x, w, dw, db *float32, n int, mean, rstd, invN float32)
TEXT ·layerNormGradRowAVX2(SB), NOSPLIT, $0-68
	MOVQ         dx+0(FP), DI
	MOVQ         grad+8(FP), DX
	MOVQ         x+16(FP), SI
	MOVQ         w+24(FP), R8
	MOVQ         dw+32(FP), R10
	MOVQ         db+40(FP), R11
	MOVQ         n+48(FP), CX
	VBROADCASTSS mean+56(FP), Y8
	VBROADCASTSS rstd+60(FP), Y9
	VXORPS       Y10, Y10, Y10
	VXORPS       Y11, Y11, Y11
	XORQ         AX, AX
	MOVQ         CX, BX
	SHLQ         $2, BX

lngrad1:
	VMOVUPS     (SI)(AX*1), Y1
	VSUBPS      Y8, Y1, Y1
	VMULPS      Y9, Y1, Y1
	VMOVUPS     (DX)(AX*1), Y2
	VMOVUPS     (R10)(AX*1), Y3
	VFMADD231PS Y2, Y1, Y3
	VMOVUPS     Y3, (R10)(AX*1)
	VADDPS      (R11)(AX*1), Y2, Y3
	VMOVUPS     Y3, (R11)(AX*1)
	VMULPS      (R8)(AX*1), Y2, Y2
	VADDPS      Y2, Y10, Y10
	VFMADD231PS Y2, Y1, Y11
	ADDQ        $32, AX
	CMPQ        AX, BX
	JNE         lngrad1
	VMOVAPS      Y10, Y0
	HSUM8
	VMULSS       invN+64(FP), X0, X0
	VBROADCASTSS X0, Y10
	VMOVAPS      Y11, Y0
	HSUM8
	VMULSS       invN+64(FP), X0, X0
	VBROADCASTSS X0, Y11
	XORQ         AX, AX

lngrad2:
	VMOVUPS      (SI)(AX*1), Y1
	VSUBPS       Y8, Y1, Y1
	VMULPS       Y9, Y1, Y1
	VMOVUPS      (DX)(AX*1), Y2
	VMULPS       (R8)(AX*1), Y2, Y2
	VSUBPS       Y10, Y2, Y2
	VFNMADD231PS Y11, Y1, Y2
	VMULPS       Y9, Y2, Y2
	VMOVUPS      Y2, (DI)(AX*1)
	ADDQ         $32, AX
	CMPQ         AX, BX
	JNE          lngrad2
	VZEROUPPER
	RET

// func layerNormRows2AVX2(dst, src, w, b *float32, n int, invN, eps float32, stats *float32)
// layerNormRowAVX2 on two consecutive rows of n (row 1 at src + n, dst +
// n), their passes interleaved so that one row's sums run while the
// other's wait: each row's operations are layerNormRowAVX2's, in its
// order, so the results are the same bit for bit. stats gets mean and
// rstd of row 0, then of row 1.
TEXT ·layerNormRows2AVX2(SB), NOSPLIT, $0-56
	MOVQ   dst+0(FP), DI
	MOVQ   src+8(FP), SI
	MOVQ   w+16(FP), R8
	MOVQ   b+24(FP), R9
	MOVQ   n+32(FP), BX
	SHLQ   $2, BX
	LEAQ   (SI)(BX*1), R10
	LEAQ   (DI)(BX*1), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y2, Y2, Y2
	XORQ   AX, AX

ln2sum:
	VADDPS (SI)(AX*1), Y0, Y0
	VADDPS (R10)(AX*1), Y2, Y2
	ADDQ   $32, AX
	CMPQ   AX, BX
	JNE    ln2sum
	HSUM8
	VMULSS       invN+40(FP), X0, X0
	VMOVAPS      X0, X12
	VBROADCASTSS X0, Y8
	VMOVAPS      Y2, Y0
	HSUM8
	VMULSS       invN+40(FP), X0, X0
	VMOVAPS      X0, X13
	VBROADCASTSS X0, Y10
	VXORPS       Y0, Y0, Y0
	VXORPS       Y2, Y2, Y2
	XORQ         AX, AX

ln2var:
	VMOVUPS     (SI)(AX*1), Y1
	VSUBPS      Y8, Y1, Y1
	VFMADD231PS Y1, Y1, Y0
	VMOVUPS     (R10)(AX*1), Y3
	VSUBPS      Y10, Y3, Y3
	VFMADD231PS Y3, Y3, Y2
	ADDQ        $32, AX
	CMPQ        AX, BX
	JNE         ln2var
	HSUM8
	VMULSS       invN+40(FP), X0, X0
	VADDSS       eps+44(FP), X0, X0
	VSQRTSS      X0, X0, X0
	VMOVSS       one<>(SB), X1
	VDIVSS       X0, X1, X0
	VMOVAPS      X0, X14
	VBROADCASTSS X0, Y9
	VMOVAPS      Y2, Y0
	HSUM8
	VMULSS       invN+40(FP), X0, X0
	VADDSS       eps+44(FP), X0, X0
	VSQRTSS      X0, X0, X0
	VMOVSS       one<>(SB), X1
	VDIVSS       X0, X1, X0
	VMOVAPS      X0, X15
	VBROADCASTSS X0, Y11
	MOVQ         stats+48(FP), AX
	VMOVSS       X12, (AX)
	VMOVSS       X14, 4(AX)
	VMOVSS       X13, 8(AX)
	VMOVSS       X15, 12(AX)
	XORQ         AX, AX

ln2apply:
	VMOVUPS     (SI)(AX*1), Y1
	VSUBPS      Y8, Y1, Y1
	VMULPS      Y9, Y1, Y1
	VMOVUPS     (R8)(AX*1), Y2
	VFMADD213PS (R9)(AX*1), Y2, Y1
	VMOVUPS     Y1, (DI)(AX*1)
	VMOVUPS     (R10)(AX*1), Y3
	VSUBPS      Y10, Y3, Y3
	VMULPS      Y11, Y3, Y3
	VMOVUPS     (R8)(AX*1), Y4
	VFMADD213PS (R9)(AX*1), Y4, Y3
	VMOVUPS     Y3, (R11)(AX*1)
	ADDQ        $32, AX
	CMPQ        AX, BX
	JNE         ln2apply
	VZEROUPPER
	RET

// func layerNormGradRows2AVX2(dx, grad, x, w, dw, db *float32, n int, mean0, rstd0, mean1, rstd1, invN float32)
// layerNormGradRowAVX2 on two consecutive rows of n (row 1 at dx, grad, x
// + n), interleaved: each row's operations in its order, and row 0's
// contribution to dw and db added before row 1's, so the results are the
// same bit for bit as the two rows one after the other.
TEXT ·layerNormGradRows2AVX2(SB), NOSPLIT, $0-76
	MOVQ         dx+0(FP), DI
	MOVQ         grad+8(FP), DX
	MOVQ         x+16(FP), SI
	MOVQ         w+24(FP), R8
	MOVQ         dw+32(FP), R10
	MOVQ         db+40(FP), R11
	MOVQ         n+48(FP), BX
	SHLQ         $2, BX
	LEAQ         (DI)(BX*1), R12
	LEAQ         (DX)(BX*1), R13
	LEAQ         (SI)(BX*1), R14
	VBROADCASTSS mean0+56(FP), Y8
	VBROADCASTSS rstd0+60(FP), Y9
	VBROADCASTSS mean1+64(FP), Y14
	VBROADCASTSS rstd1+68(FP), Y15
	VXORPS       Y10, Y10, Y10
	VXORPS       Y11, Y11, Y11
	VXORPS       Y12, Y12, Y12
	VXORPS       Y13, Y13, Y13
	XORQ         AX, AX

ln2grad1:
	VMOVUPS     (SI)(AX*1), Y1
	VSUBPS      Y8, Y1, Y1
	VMULPS      Y9, Y1, Y1
	VMOVUPS     (R14)(AX*1), Y5
	VSUBPS      Y14, Y5, Y5
	VMULPS      Y15, Y5, Y5
	VMOVUPS     (DX)(AX*1), Y2
	VMOVUPS     (R13)(AX*1), Y6
	VMOVUPS     (R10)(AX*1), Y3
	VFMADD231PS Y2, Y1, Y3
	VFMADD231PS Y6, Y5, Y3
	VMOVUPS     Y3, (R10)(AX*1)
	VADDPS      (R11)(AX*1), Y2, Y3
	VADDPS      Y3, Y6, Y3
	VMOVUPS     Y3, (R11)(AX*1)
	VMULPS      (R8)(AX*1), Y2, Y2
	VADDPS      Y2, Y10, Y10
	VFMADD231PS Y2, Y1, Y11
	VMULPS      (R8)(AX*1), Y6, Y6
	VADDPS      Y6, Y12, Y12
	VFMADD231PS Y6, Y5, Y13
	ADDQ        $32, AX
	CMPQ        AX, BX
	JNE         ln2grad1
	VMOVAPS      Y10, Y0
	HSUM8
	VMULSS       invN+72(FP), X0, X0
	VBROADCASTSS X0, Y10
	VMOVAPS      Y11, Y0
	HSUM8
	VMULSS       invN+72(FP), X0, X0
	VBROADCASTSS X0, Y11
	VMOVAPS      Y12, Y0
	HSUM8
	VMULSS       invN+72(FP), X0, X0
	VBROADCASTSS X0, Y12
	VMOVAPS      Y13, Y0
	HSUM8
	VMULSS       invN+72(FP), X0, X0
	VBROADCASTSS X0, Y13
	XORQ         AX, AX

ln2grad2:
	VMOVUPS      (SI)(AX*1), Y1
	VSUBPS       Y8, Y1, Y1
	VMULPS       Y9, Y1, Y1
	VMOVUPS      (DX)(AX*1), Y2
	VMULPS       (R8)(AX*1), Y2, Y2
	VSUBPS       Y10, Y2, Y2
	VFNMADD231PS Y11, Y1, Y2
	VMULPS       Y9, Y2, Y2
	VMOVUPS      Y2, (DI)(AX*1)
	VMOVUPS      (R14)(AX*1), Y5
	VSUBPS       Y14, Y5, Y5
	VMULPS       Y15, Y5, Y5
	VMOVUPS      (R13)(AX*1), Y6
	VMULPS       (R8)(AX*1), Y6, Y6
	VSUBPS       Y12, Y6, Y6
	VFNMADD231PS Y13, Y5, Y6
	VMULPS       Y15, Y6, Y6
	VMOVUPS      Y6, (R12)(AX*1)
	ADDQ         $32, AX
	CMPQ         AX, BX
	JNE          ln2grad2
	VZEROUPPER
	RET

// AVX-512F versions of exp, exp-shift-sum, GELU-tanh and its derivative:
// the same operations as the AVX2 ones above, lane for lane, on 16 lanes
// (constants broadcast from the same tables), so an element's result does
// not depend on which kernel ran it. Lengths are multiples of 16.

// EXP16 replaces Z0 by exp(Z0); it clobbers Z1–Z5 and K1. As EXP8, with
// the lanes below the range cleared under a mask instead of by VANDNPS,
// and p·2ⁿ made by one VSCALEFPS instead of building 2ⁿ's bits (convert,
// add the bias, shift) and multiplying: the same value, since both scale
// by a power of two in range and round once (TestWideMatchesAVX2).
#define EXP16 \
	VBROADCASTSS      expLo<>(SB), Z5; \
	VCMPPS            $1, Z5, Z0, K1; \
	VMAXPS            Z0, Z5, Z0; \
	VBROADCASTSS      expHi<>(SB), Z5; \
	VMINPS            Z0, Z5, Z0; \
	VMULPS.BCST       log2e<>(SB), Z0, Z1; \
	VRNDSCALEPS       $0, Z1, Z1; \
	VFNMADD231PS.BCST expC1<>(SB), Z1, Z0; \
	VFNMADD231PS.BCST expC2<>(SB), Z1, Z0; \
	VBROADCASTSS      expP0<>(SB), Z2; \
	VFMADD213PS.BCST  expP1<>(SB), Z0, Z2; \
	VFMADD213PS.BCST  expP2<>(SB), Z0, Z2; \
	VFMADD213PS.BCST  expP3<>(SB), Z0, Z2; \
	VFMADD213PS.BCST  expP4<>(SB), Z0, Z2; \
	VFMADD213PS.BCST  expP5<>(SB), Z0, Z2; \
	VMULPS            Z0, Z0, Z3; \
	VFMADD213PS       Z0, Z3, Z2; \
	VADDPS.BCST       one<>(SB), Z2, Z2; \
	VSCALEFPS         Z1, Z2, Z0; \
	VPXORD            Z0, Z0, K1, Z0

// func expAVX512(dst, src *float32, n int)
TEXT ·expAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

exp16loop:
	CMPQ    CX, $16
	JLT     exp16done
	VMOVUPS (SI), Z0
	EXP16
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     exp16loop

exp16done:
	VZEROUPPER
	RET

// func expShiftSumAVX512(dst, src *float32, n int, scale, shift float32) float32
TEXT ·expShiftSumAVX512(SB), NOSPLIT, $0-36
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Z14
	VBROADCASTSS shift+28(FP), Z13
	VPXORD       Z15, Z15, Z15

ess16loop:
	CMPQ        CX, $16
	JLT         ess16done
	VMOVUPS     (SI), Z0
	VFMSUB213PS Z13, Z14, Z0
	EXP16
	VMOVUPS     Z0, (DI)
	VADDPS      Z0, Z15, Z15
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JMP         ess16loop

ess16done:
	VEXTRACTF64X4 $1, Z15, Y1
	VADDPS        Y1, Y15, Y0
	HSUM8
	MOVSS         X0, ret+32(FP)
	VZEROUPPER
	RET

// func softmaxRowsAVX512(s *float32, T int, causal bool)
// Each row i of the T×T block s (T a multiple of 16) becomes its softmax
// over columns j < n (n = i+1 when causal, else T), the rest 0: the max of
// row[:n] (as maxAVX2, −Inf read as 0), exp(x − max) of row[:w] for the
// w = min(T, n rounded up to 16) columns, the columns from n read as −Inf
// (exp 0), summed in 16 lanes as expShiftSumAVX512 sums, each scaled by
// the float32 1/sum as scaleAVX2 does, and columns from w cleared: the
// result of Math's Max, ExpShiftSum and Scale row by row, bit for bit, in
// one call per block.
TEXT ·softmaxRowsAVX512(SB), NOSPLIT, $0-17
	MOVQ         s+0(FP), DI
	MOVQ         T+8(FP), R8
	MOVBQZX      causal+16(FP), R9
	XORQ         R10, R10
	MOVL         $0xff800000, AX
	VPBROADCASTD AX, Z16
	VBROADCASTSS one<>(SB), Z14
	VPXORD       Z18, Z18, Z18

smrow:
	CMPQ R10, R8
	JGE  smdone
	MOVQ R8, R11
	TESTQ R9, R9
	JZ   smmax
	LEAQ 1(R10), R11

smmax:
	// Z17: the running max of row[:n] (R11 = n).
	VMOVAPS Z16, Z17
	MOVQ    DI, SI
	MOVQ    R11, CX

smmaxloop:
	CMPQ    CX, $16
	JLT     smmaxtail
	VMAXPS  (SI), Z17, Z17
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     smmaxloop

smmaxtail:
	TESTQ   CX, CX
	JZ      smmaxred
	MOVL    $1, BX
	SHLL    CX, BX
	DECL    BX
	KMOVW   BX, K2
	VMAXPS  (SI), Z17, K2, Z17

smmaxred:
	VEXTRACTF64X4 $1, Z17, Y1
	VMAXPS        Y1, Y17, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X1, X0, X0
	VMOVHLPS      X0, X1, X1
	VMAXPS        X1, X0, X0
	VMOVSHDUP     X0, X1
	VMAXSS        X1, X0, X0
	VMOVD         X0, AX
	CMPL          AX, $0xff800000
	JNE           smshift
	VXORPS        X0, X0, X0

smshift:
	VBROADCASTSS X0, Z13
	// DX: the w/16 vectors exponentiated; CX: valid columns left.
	LEAQ    15(R11), DX
	ANDQ    $-16, DX
	CMPQ    DX, R8
	JLE     smw
	MOVQ    R8, DX

smw:
	MOVQ    DX, R12
	SHRQ    $4, DX
	MOVQ    DI, SI
	MOVQ    R11, CX
	VPXORD  Z15, Z15, Z15

smexp:
	MOVL    $0xffff, BX
	CMPQ    CX, $16
	JGE     smfull
	MOVL    $1, BX
	SHLL    CX, BX
	DECL    BX

smfull:
	KMOVW       BX, K2
	VMOVAPS     Z16, Z0
	VMOVUPS     (SI), K2, Z0
	VFMSUB213PS Z13, Z14, Z0
	EXP16
	VMOVUPS     Z0, (SI)
	VADDPS      Z0, Z15, Z15
	ADDQ        $64, SI
	SUBQ        $16, CX
	DECQ        DX
	JNZ         smexp
	VEXTRACTF64X4 $1, Z15, Y1
	VADDPS        Y1, Y15, Y0
	HSUM8
	VMOVSS        one<>(SB), X1
	VDIVSS        X0, X1, X1
	VBROADCASTSS  X1, Z2
	MOVQ          DI, SI
	MOVQ          R12, DX
	SHRQ          $4, DX

smscale:
	VMULPS  (SI), Z2, Z3
	VMOVUPS Z3, (SI)
	ADDQ    $64, SI
	DECQ    DX
	JNZ     smscale
	MOVQ    R8, DX
	SUBQ    R12, DX
	SHRQ    $4, DX
	JZ      smnext

smclear:
	VMOVUPS Z18, (SI)
	ADDQ    $64, SI
	DECQ    DX
	JNZ     smclear

smnext:
	LEAQ (DI)(R8*4), DI
	INCQ R10
	JMP  smrow

smdone:
	VZEROUPPER
	RET

// func softmaxGradRowsAVX512(ds, p *float32, T int, causal bool, scale float32)
// Each row i of the T×T blocks ds and p (T a multiple of 16) becomes
// p·(ds − Σ_j p·ds)·scale over columns j < n (n = i+1 when causal, else
// T), the rest +0: the dot in 16 lanes (columns from n masked off), then
// summed across them as expShiftSumAVX512 sums; each element as
// softmaxGradAVX2 computes it.
TEXT ·softmaxGradRowsAVX512(SB), NOSPLIT, $0-32
	MOVQ         ds+0(FP), DI
	MOVQ         p+8(FP), SI
	MOVQ         T+16(FP), R8
	MOVBQZX      causal+24(FP), R9
	VBROADCASTSS scale+28(FP), Z15
	VPXORD       Z18, Z18, Z18
	XORQ         R10, R10

sgrow:
	CMPQ  R10, R8
	JGE   sgrdone
	MOVQ  R8, R11
	TESTQ R9, R9
	JZ    sgrdot
	LEAQ  1(R10), R11

sgrdot:
	// DX: the vectors holding row[:n]; CX: valid columns left.
	LEAQ   15(R11), DX
	SHRQ   $4, DX
	MOVQ   DX, R12
	MOVQ   R11, CX
	XORQ   AX, AX
	VPXORD Z16, Z16, Z16

sgrdotloop:
	MOVL        $0xffff, BX
	CMPQ        CX, $16
	JGE         sgrdotfull
	MOVL        $1, BX
	SHLL        CX, BX
	DECL        BX

sgrdotfull:
	KMOVW       BX, K2
	VMOVUPS.Z   (SI)(AX*1), K2, Z0
	VFMADD231PS (DI)(AX*1), Z0, Z16
	ADDQ        $64, AX
	SUBQ        $16, CX
	DECQ        DX
	JNZ         sgrdotloop
	VEXTRACTF64X4 $1, Z16, Y1
	VADDPS        Y1, Y16, Y0
	HSUM8
	VBROADCASTSS  X0, Z14
	MOVQ          R12, DX
	MOVQ          R11, CX
	XORQ          AX, AX

sgrscale:
	MOVL      $0xffff, BX
	CMPQ      CX, $16
	JGE       sgrscalefull
	MOVL      $1, BX
	SHLL      CX, BX
	DECL      BX

sgrscalefull:
	KMOVW     BX, K2
	VMOVUPS   (DI)(AX*1), Z0
	VSUBPS    Z14, Z0, Z0
	VMULPS    (SI)(AX*1), Z0, Z0
	VMULPS.Z  Z15, Z0, K2, Z0
	VMOVUPS   Z0, (DI)(AX*1)
	ADDQ      $64, AX
	SUBQ      $16, CX
	DECQ      DX
	JNZ       sgrscale
	MOVQ      R8, DX
	SHRQ      $4, DX
	SUBQ      R12, DX
	JZ        sgrnext

sgrclear:
	VMOVUPS Z18, (DI)(AX*1)
	ADDQ    $64, AX
	DECQ    DX
	JNZ     sgrclear

sgrnext:
	LEAQ (DI)(R8*4), DI
	LEAQ (SI)(R8*4), SI
	INCQ R10
	JMP  sgrow

sgrdone:
	VZEROUPPER
	RET

// func geluTanhAVX512(dst, src *float32, n int)
TEXT ·geluTanhAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

gelu16loop:
	CMPQ             CX, $16
	JLT              gelu16done
	VMOVUPS          (SI), Z6
	VMULPS           Z6, Z6, Z1
	VBROADCASTSS     geluB<>(SB), Z0
	VFMADD213PS.BCST geluA<>(SB), Z1, Z0
	VMULPS           Z6, Z0, Z0
	EXP16
	VADDPS.BCST      one<>(SB), Z0, Z0
	VDIVPS           Z0, Z6, Z0
	VMOVUPS          Z0, (DI)
	ADDQ             $64, SI
	ADDQ             $64, DI
	SUBQ             $16, CX
	JMP              gelu16loop

gelu16done:
	VZEROUPPER
	RET

// func geluTanhGradAVX512(dst, grad, x *float32, n int)
TEXT ·geluTanhGradAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ grad+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX

grad16loop:
	CMPQ             CX, $16
	JLT              grad16done
	VMOVUPS          (SI), Z6
	VMULPS           Z6, Z6, Z7
	VBROADCASTSS     geluB<>(SB), Z0
	VFMADD213PS.BCST geluA<>(SB), Z7, Z0
	VMULPS           Z6, Z0, Z0
	EXP16
	VBROADCASTSS     one<>(SB), Z8
	VADDPS           Z8, Z0, Z9
	VDIVPS           Z9, Z8, Z9
	VMULPS           Z9, Z0, Z0
	VBROADCASTSS     geluD<>(SB), Z10
	VFMSUB213PS.BCST geluA<>(SB), Z7, Z10
	VMULPS           Z6, Z10, Z10
	VMULPS           Z0, Z10, Z10
	VFMADD213PS      Z9, Z9, Z10
	VMULPS           (DX), Z10, Z10
	VMOVUPS          Z10, (DI)
	ADDQ             $64, SI
	ADDQ             $64, DX
	ADDQ             $64, DI
	SUBQ             $16, CX
	JMP              grad16loop

grad16done:
	VZEROUPPER
	RET

// func softmaxGradAVX2(ds, p *float32, n int, dot, scale float32)
TEXT ·softmaxGradAVX2(SB), NOSPLIT, $0-32
	MOVQ         ds+0(FP), DI
	MOVQ         p+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS dot+24(FP), Y14
	VBROADCASTSS scale+28(FP), Y15

sgloop:
	CMPQ    CX, $8
	JLT     sgdone
	VMOVUPS (DI), Y0
	VSUBPS  Y14, Y0, Y0
	VMULPS  (SI), Y0, Y0
	VMULPS  Y15, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     sgloop

sgdone:
	VZEROUPPER
	RET
