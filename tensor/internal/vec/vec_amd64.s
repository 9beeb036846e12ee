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

DATA jvec4<>+0(SB)/4, $0
DATA jvec4<>+4(SB)/4, $2
DATA jvec4<>+8(SB)/4, $4
DATA jvec4<>+12(SB)/4, $6
GLOBL jvec4<>(SB), RODATA|NOPTR, $16

// func maxPool2PlaneAVX2(dst *float32, arg *int32, src *float32, rows, cols, stride int, bias float32, flags, w int)
//
// MaxPool2Plane for cols ≥ 8: each row's windows eight at a time, then one
// block ending at the row's last window (overlapping the one before; the
// windows it repeats come out the same). Per block, 16 values of each of
// the two input rows are split into even (a, c) and odd (b, d) columns;
// each candidate replaces the best so far where it is greater or NaN (two
// compares), carrying its offset 0, 1, w or w+1 along. VSHUFPS leaves the
// windows in lane order 0, 1, 4, 5 | 2, 3, 6, 7, which jvec follows and
// VPERMPD $0xD8 undoes.
//
// Registers: SI, DX the block's two input rows; DI, R8 its outputs; R13
// the index of its first window's first element; Y15 zero; Y14 the bias
// (−0 for none); Y13 int 1; Y12 w; Y11 w+1; Y10 all ones when the ReLU
// applies.
#define POOL8 \
	POOLPICK(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15, jvec<>(SB), 32) \
	VPERMPD      $0xD8, Y4, Y4 \
	VPERMQ       $0xD8, Y8, Y8 \
	VMOVUPS      Y4, (DI) \
	VMOVDQU      Y8, (R8)

// The same for four windows in xmm registers, whose VSHUFPS leaves them in
// order.
#define POOL4 \
	POOLPICK(X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15, jvec4<>(SB), 16) \
	VMOVUPS      X4, (DI) \
	VMOVDQU      X8, (R8)

// POOLPICK is POOL8 and POOL4 up to the permutes and stores, on the
// registers V0-V15 (all ymm or all xmm) with the offset table J and the
// second half of each input row HI bytes in: the windows' maxima (through
// the ReLU) end in V4, their indices in V8.
#define POOLPICK(V0, V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11, V12, V13, V14, V15, J, HI) \
	VMOVD        R13, X9 \
	VPBROADCASTD X9, V9 \
	VPADDD       J, V9, V9 \
	VMOVUPS      (SI), V0 \
	VMOVUPS      HI(SI), V1 \
	VMOVUPS      (DX), V2 \
	VMOVUPS      HI(DX), V3 \
	VADDPS       V14, V0, V0 \
	VADDPS       V14, V1, V1 \
	VADDPS       V14, V2, V2 \
	VADDPS       V14, V3, V3 \
	VSHUFPS      $0x88, V1, V0, V4 \
	VSHUFPS      $0xDD, V1, V0, V5 \
	VSHUFPS      $0x88, V3, V2, V6 \
	VSHUFPS      $0xDD, V3, V2, V7 \
	VPXOR        V8, V8, V8 \
	VCMPPS       $0x1E, V4, V5, V0 \
	VCMPPS       $0x03, V5, V5, V1 \
	VORPS        V1, V0, V0 \
	VBLENDVPS    V0, V5, V4, V4 \
	VBLENDVPS    V0, V13, V8, V8 \
	VCMPPS       $0x1E, V4, V6, V0 \
	VCMPPS       $0x03, V6, V6, V1 \
	VORPS        V1, V0, V0 \
	VBLENDVPS    V0, V6, V4, V4 \
	VBLENDVPS    V0, V12, V8, V8 \
	VCMPPS       $0x1E, V4, V7, V0 \
	VCMPPS       $0x03, V7, V7, V1 \
	VORPS        V1, V0, V0 \
	VBLENDVPS    V0, V7, V4, V4 \
	VBLENDVPS    V0, V11, V8, V8 \
	VMAXPS       V4, V15, V0 \
	VADDPS       V15, V0, V0 \
	VBLENDVPS    V10, V0, V4, V4 \
	VPADDD       V9, V8, V8

// POOLSETUP loads the constants (see POOL8) and the row count into R10.
#define POOLSETUP \
	VPXOR        Y15, Y15, Y15 \
	VBROADCASTSS negzero<>(SB), Y14 \
	MOVQ         flags+56(FP), R9 \
	TESTQ        $1, R9 \
	JEQ          2(PC) \
	VBROADCASTSS bias+48(FP), Y14 \
	VPXOR        Y10, Y10, Y10 \
	TESTQ        $2, R9 \
	JEQ          2(PC) \
	VPCMPEQD     Y10, Y10, Y10 \
	VPCMPEQD     Y13, Y13, Y13 \
	VPSUBD       Y13, Y15, Y13 \
	VPBROADCASTD w+64(FP), Y12 \
	VPADDD       Y13, Y12, Y11 \
	MOVQ         rows+24(FP), R10

// POOLPLANE is the body of maxPool2PlaneAVX2 (POOL = POOL8, N = 8
// windows a block) and maxPool2Plane4AVX2 (POOL4, N = 4): each pair of
// input rows N windows a block, the block's input rows advancing IN
// bytes, its outputs OUT bytes and its window index IDX elements, then
// one last block ending at the row's last window. R11 holds the element
// index of input row 2r, R12 that of output row r, BX 2r·w; AX, after the
// row's blocks, the windows to step back.
#define POOLPLANE(POOL, N, IN, OUT, IDX) \
	POOLSETUP \
	XORQ R11, R11 \
	XORQ R12, R12 \
	XORQ BX, BX \
row: \
	MOVQ src+16(FP), SI \
	LEAQ (SI)(R11*4), SI \
	MOVQ stride+40(FP), AX \
	LEAQ (SI)(AX*4), DX \
	MOVQ dst+0(FP), DI \
	LEAQ (DI)(R12*4), DI \
	MOVQ arg+8(FP), R8 \
	LEAQ (R8)(R12*4), R8 \
	MOVQ BX, R13 \
	MOVQ cols+32(FP), CX \
block: \
	CMPQ CX, $N \
	JLT  tail \
	POOL \
	ADDQ $IN, SI \
	ADDQ $IN, DX \
	ADDQ $OUT, DI \
	ADDQ $OUT, R8 \
	ADDQ $IDX, R13 \
	SUBQ $N, CX \
	JMP  block \
tail: \
	TESTQ CX, CX \
	JEQ   next \
	MOVQ  $N, AX \
	SUBQ  CX, AX \
	SHLQ  $3, AX \
	SUBQ  AX, SI \
	SUBQ  AX, DX \
	SHRQ  $1, AX \
	SUBQ  AX, DI \
	SUBQ  AX, R8 \
	SHRQ  $1, AX \
	SUBQ  AX, R13 \
	POOL \
next: \
	MOVQ stride+40(FP), AX \
	LEAQ (R11)(AX*2), R11 \
	ADDQ cols+32(FP), R12 \
	MOVQ w+64(FP), AX \
	LEAQ (BX)(AX*2), BX \
	DECQ R10 \
	JNE  row \
	VZEROUPPER \
	RET

TEXT ·maxPool2PlaneAVX2(SB), NOSPLIT, $0-72
	POOLPLANE(POOL8, 8, 64, 32, 16)

// func maxPool2Plane4AVX2(dst *float32, arg *int32, src *float32, rows, cols, stride int, bias float32, flags, w int)
//
// maxPool2PlaneAVX2 for 4 ≤ cols < 8, four windows at a time.
TEXT ·maxPool2Plane4AVX2(SB), NOSPLIT, $0-72
	POOLPLANE(POOL4, 4, 32, 16, 8)

// func sumRowsAVX2(dst, src *float32, stride, rows, cols int)
// dst[j] += src[r*stride+j] for r = 0, 1, …, rows−1 in order, j < cols
// (a multiple of 8; rows ≥ 1): 64 columns at a time, their sums held in
// Y0–Y7 down all the rows, then 8 at a time.
TEXT ·sumRowsAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), R8
	SHLQ $2, R8
	MOVQ rows+24(FP), R9
	MOVQ cols+32(FP), CX

sr64:
	CMPQ CX, $64
	JLT  sr8
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 128(DI), Y4
	VMOVUPS 160(DI), Y5
	VMOVUPS 192(DI), Y6
	VMOVUPS 224(DI), Y7
	MOVQ SI, R10
	MOVQ R9, R11

sr64row:
	VADDPS  0(R10), Y0, Y0
	VADDPS  32(R10), Y1, Y1
	VADDPS  64(R10), Y2, Y2
	VADDPS  96(R10), Y3, Y3
	VADDPS  128(R10), Y4, Y4
	VADDPS  160(R10), Y5, Y5
	VADDPS  192(R10), Y6, Y6
	VADDPS  224(R10), Y7, Y7
	ADDQ R8, R10
	DECQ R11
	JNZ  sr64row
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	ADDQ $256, DI
	ADDQ $256, SI
	SUBQ $64, CX
	JMP  sr64

sr8:
	CMPQ    CX, $8
	JLT     srdone
	VMOVUPS (DI), Y0
	MOVQ    SI, R10
	MOVQ    R9, R11

sr8row:
	VADDPS (R10), Y0, Y0
	ADDQ   R8, R10
	DECQ   R11
	JNZ    sr8row
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     sr8

srdone:
	VZEROUPPER
	RET
