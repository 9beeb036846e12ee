#include "textflag.h"

// AVX2 versions of the kernels in vec.go; see there for the contracts.
// Lengths and strides are in float32 elements. Each loop handles 8 (or 32)
// elements per iteration and finishes with scalar VEX instructions, so no
// access goes past the last element.

// Window i's first-column offset 2i in the lane order VSHUFPS leaves the
// windows in (0, 1, 4, 5 | 2, 3, 6, 7); VPERMPD $0xD8 restores it.
DATA jvec<>+0(SB)/4, $0
DATA jvec<>+4(SB)/4, $2
DATA jvec<>+8(SB)/4, $8
DATA jvec<>+12(SB)/4, $10
DATA jvec<>+16(SB)/4, $4
DATA jvec<>+20(SB)/4, $6
DATA jvec<>+24(SB)/4, $12
DATA jvec<>+28(SB)/4, $14
GLOBL jvec<>(SB), RODATA|NOPTR, $32

// −0.0: adding it changes nothing (stands in for "no bias").
DATA negzero<>+0(SB)/4, $0x80000000
GLOBL negzero<>(SB), RODATA|NOPTR, $4

// func addAVX2(dst, src *float32, n int)
TEXT ·addAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

add32:
	CMPQ    CX, $32
	JLT     add8
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VADDPS  (SI), Y0, Y0
	VADDPS  32(SI), Y1, Y1
	VADDPS  64(SI), Y2, Y2
	VADDPS  96(SI), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $32, CX
	JMP     add32

add8:
	CMPQ    CX, $8
	JLT     add1
	VMOVUPS (DI), Y0
	VADDPS  (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     add8

add1:
	TESTQ  CX, CX
	JEQ    adddone
	VMOVSS (DI), X0
	VADDSS (SI), X0, X0
	VMOVSS X0, (DI)
	ADDQ   $4, SI
	ADDQ   $4, DI
	DECQ   CX
	JMP    add1

adddone:
	VZEROUPPER
	RET

// func addRowsAVX2(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)
TEXT ·addRowsAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ srcStride+24(FP), R9
	MOVQ rows+32(FP), R10
	MOVQ cols+40(FP), R11
	SHLQ $2, R8
	SHLQ $2, R9

rowsrow:
	MOVQ DI, AX
	MOVQ SI, BX
	MOVQ R11, CX

rows8:
	CMPQ    CX, $8
	JLT     rows1
	VMOVUPS (AX), Y0
	VADDPS  (BX), Y0, Y0
	VMOVUPS Y0, (AX)
	ADDQ    $32, AX
	ADDQ    $32, BX
	SUBQ    $8, CX
	JMP     rows8

rows1:
	TESTQ  CX, CX
	JEQ    rowsnext
	VMOVSS (AX), X0
	VADDSS (BX), X0, X0
	VMOVSS X0, (AX)
	ADDQ   $4, AX
	ADDQ   $4, BX
	DECQ   CX
	JMP    rows1

rowsnext:
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ R10
	JNE  rowsrow
	VZEROUPPER
	RET

// func biasAVX2(dst, src *float32, n int, bias float32, flags int)
TEXT ·biasAVX2(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVQ         flags+32(FP), DX
	VXORPS       Y15, Y15, Y15
	VBROADCASTSS negzero<>(SB), Y14
	TESTQ        $1, DX
	JEQ          biasready
	VBROADCASTSS bias+24(FP), Y14

biasready:
	TESTQ $2, DX
	JNE   relu8

bias8:
	CMPQ    CX, $8
	JLT     bias1
	VMOVUPS (SI), Y0
	VADDPS  Y14, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     bias8

bias1:
	TESTQ  CX, CX
	JEQ    biasdone
	VMOVSS (SI), X0
	VADDSS X14, X0, X0
	VMOVSS X0, (DI)
	ADDQ   $4, SI
	ADDQ   $4, DI
	DECQ   CX
	JMP    bias1

// max(x, 0) as Go computes it: VMAXPS returns its second source when
// either is NaN or they are equal, so max(0, x) keeps NaN and −0; adding
// +0 then turns −0 into +0 and leaves everything else alone.
relu8:
	CMPQ    CX, $8
	JLT     relu1
	VMOVUPS (SI), Y0
	VADDPS  Y14, Y0, Y0
	VMAXPS  Y0, Y15, Y0
	VADDPS  Y15, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     relu8

relu1:
	TESTQ  CX, CX
	JEQ    biasdone
	VMOVSS (SI), X0
	VADDSS X14, X0, X0
	VMAXSS X0, X15, X0
	VADDSS X15, X0, X0
	VMOVSS X0, (DI)
	ADDQ   $4, SI
	ADDQ   $4, DI
	DECQ   CX
	JMP    relu1

biasdone:
	VZEROUPPER
	RET

// func reluMaskAVX2(dst, grad, y *float32, n int)
TEXT ·reluMaskAVX2(SB), NOSPLIT, $0-32
	MOVQ     dst+0(FP), DI
	MOVQ     grad+8(FP), SI
	MOVQ     y+16(FP), DX
	MOVQ     n+24(FP), CX
	VPXOR    Y15, Y15, Y15
	VPCMPEQD Y14, Y14, Y14
	VPSRLD   $1, Y14, Y14  // 0x7fffffff: drops the sign, so −0 counts as 0

mask8:
	CMPQ     CX, $8
	JLT      mask1
	VMOVUPS  (DX), Y0
	VPAND    Y14, Y0, Y0
	VPCMPEQD Y15, Y0, Y0   // all ones where y is ±0
	VANDNPS  (SI), Y0, Y0  // g where y is not
	VMOVUPS  Y0, (DI)
	ADDQ     $32, SI
	ADDQ     $32, DX
	ADDQ     $32, DI
	SUBQ     $8, CX
	JMP      mask8

mask1:
	TESTQ    CX, CX
	JEQ      maskdone
	VMOVSS   (DX), X0
	VPAND    X14, X0, X0
	VPCMPEQD X15, X0, X0
	VMOVSS   (SI), X1
	VANDNPS  X1, X0, X0
	VMOVSS   X0, (DI)
	ADDQ     $4, SI
	ADDQ     $4, DX
	ADDQ     $4, DI
	DECQ     CX
	JMP      mask1

maskdone:
	VZEROUPPER
	RET

// func maxPool2AVX2(dst *float32, arg *int32, r0, r1 *float32, n int, bias float32, flags, base, w int)
//
// Eight windows per iteration: 16 values of each row are split into even
// (a, c) and odd (b, d) columns; each candidate replaces the best so far
// where it is greater or NaN (two compares), carrying its offset 0, 1, w
// or w+1 along.
TEXT ·maxPool2AVX2(SB), NOSPLIT, $0-72
	MOVQ         dst+0(FP), DI
	MOVQ         arg+8(FP), R8
	MOVQ         r0+16(FP), SI
	MOVQ         r1+24(FP), DX
	MOVQ         n+32(FP), CX
	MOVQ         flags+48(FP), R9
	VPXOR        Y15, Y15, Y15           // 0.0 and int 0
	VBROADCASTSS negzero<>(SB), Y14      // bias
	TESTQ        $1, R9
	JEQ          poolready
	VBROADCASTSS bias+40(FP), Y14

poolready:
	VPCMPEQD     Y13, Y13, Y13
	VPSUBD       Y13, Y15, Y13           // int 1
	VPBROADCASTD w+64(FP), Y12           // w
	VPADDD       Y13, Y12, Y11           // w+1
	VPBROADCASTD base+56(FP), Y10
	VPADDD       jvec<>(SB), Y10, Y10    // base + 2i, shuffled lane order
	VPSLLD       $4, Y13, Y9             // 16: next eight windows

poolloop:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	VMOVUPS   (DX), Y2
	VMOVUPS   32(DX), Y3
	VADDPS    Y14, Y0, Y0
	VADDPS    Y14, Y1, Y1
	VADDPS    Y14, Y2, Y2
	VADDPS    Y14, Y3, Y3
	VSHUFPS   $0x88, Y1, Y0, Y4          // a = r0[2i]
	VSHUFPS   $0xDD, Y1, Y0, Y5          // b = r0[2i+1]
	VSHUFPS   $0x88, Y3, Y2, Y6          // c = r1[2i]
	VSHUFPS   $0xDD, Y3, Y2, Y7          // d = r1[2i+1]
	VPXOR     Y8, Y8, Y8                 // offset of a

	VCMPPS    $0x1E, Y4, Y5, Y0          // b > best
	VCMPPS    $0x03, Y5, Y5, Y1          // b is NaN
	VORPS     Y1, Y0, Y0
	VBLENDVPS Y0, Y5, Y4, Y4
	VBLENDVPS Y0, Y13, Y8, Y8

	VCMPPS    $0x1E, Y4, Y6, Y0
	VCMPPS    $0x03, Y6, Y6, Y1
	VORPS     Y1, Y0, Y0
	VBLENDVPS Y0, Y6, Y4, Y4
	VBLENDVPS Y0, Y12, Y8, Y8

	VCMPPS    $0x1E, Y4, Y7, Y0
	VCMPPS    $0x03, Y7, Y7, Y1
	VORPS     Y1, Y0, Y0
	VBLENDVPS Y0, Y7, Y4, Y4
	VBLENDVPS Y0, Y11, Y8, Y8

	TESTQ     $2, R9
	JEQ       poolstore
	VMAXPS    Y4, Y15, Y4                // max(best, 0) as in biasAVX2
	VADDPS    Y15, Y4, Y4

poolstore:
	VPADDD    Y10, Y8, Y8
	VPERMPD   $0xD8, Y4, Y4
	VPERMQ    $0xD8, Y8, Y8
	VMOVUPS   Y4, (DI)
	VMOVDQU   Y8, (R8)
	VPADDD    Y9, Y10, Y10
	ADDQ      $64, SI
	ADDQ      $64, DX
	ADDQ      $32, DI
	ADDQ      $32, R8
	SUBQ      $8, CX
	JNE       poolloop
	VZEROUPPER
	RET

DATA jvec4<>+0(SB)/4, $0
DATA jvec4<>+4(SB)/4, $2
DATA jvec4<>+8(SB)/4, $4
DATA jvec4<>+12(SB)/4, $6
GLOBL jvec4<>(SB), RODATA|NOPTR, $16

// func maxPool2x4AVX2(dst *float32, arg *int32, r0, r1 *float32, n int, bias float32, flags, base, w int)
//
// maxPool2AVX2 four windows at a time (n a multiple of 4), in xmm
// registers, whose VSHUFPS leaves the windows in order.
TEXT ·maxPool2x4AVX2(SB), NOSPLIT, $0-72
	MOVQ         dst+0(FP), DI
	MOVQ         arg+8(FP), R8
	MOVQ         r0+16(FP), SI
	MOVQ         r1+24(FP), DX
	MOVQ         n+32(FP), CX
	MOVQ         flags+48(FP), R9
	VPXOR        X15, X15, X15
	VBROADCASTSS negzero<>(SB), X14
	TESTQ        $1, R9
	JEQ          pool4ready
	VBROADCASTSS bias+40(FP), X14

pool4ready:
	VPCMPEQD     X13, X13, X13
	VPSUBD       X13, X15, X13
	VPBROADCASTD w+64(FP), X12
	VPADDD       X13, X12, X11
	VPBROADCASTD base+56(FP), X10
	VPADDD       jvec4<>(SB), X10, X10
	VPSLLD       $3, X13, X9             // 8: next four windows

pool4loop:
	VMOVUPS   (SI), X0
	VMOVUPS   16(SI), X1
	VMOVUPS   (DX), X2
	VMOVUPS   16(DX), X3
	VADDPS    X14, X0, X0
	VADDPS    X14, X1, X1
	VADDPS    X14, X2, X2
	VADDPS    X14, X3, X3
	VSHUFPS   $0x88, X1, X0, X4
	VSHUFPS   $0xDD, X1, X0, X5
	VSHUFPS   $0x88, X3, X2, X6
	VSHUFPS   $0xDD, X3, X2, X7
	VPXOR     X8, X8, X8

	VCMPPS    $0x1E, X4, X5, X0
	VCMPPS    $0x03, X5, X5, X1
	VORPS     X1, X0, X0
	VBLENDVPS X0, X5, X4, X4
	VBLENDVPS X0, X13, X8, X8

	VCMPPS    $0x1E, X4, X6, X0
	VCMPPS    $0x03, X6, X6, X1
	VORPS     X1, X0, X0
	VBLENDVPS X0, X6, X4, X4
	VBLENDVPS X0, X12, X8, X8

	VCMPPS    $0x1E, X4, X7, X0
	VCMPPS    $0x03, X7, X7, X1
	VORPS     X1, X0, X0
	VBLENDVPS X0, X7, X4, X4
	VBLENDVPS X0, X11, X8, X8

	TESTQ     $2, R9
	JEQ       pool4store
	VMAXPS    X4, X15, X4
	VADDPS    X15, X4, X4

pool4store:
	VPADDD    X10, X8, X8
	VMOVUPS   X4, (DI)
	VMOVDQU   X8, (R8)
	VPADDD    X9, X10, X10
	ADDQ      $32, SI
	ADDQ      $32, DX
	ADDQ      $16, DI
	ADDQ      $16, R8
	SUBQ      $4, CX
	JNE       pool4loop
	VZEROUPPER
	RET
