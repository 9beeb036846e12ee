#include "textflag.h"

// AVX2 versions of sgdGo and adamGo (kernel.go) for n a multiple of 8.
// Every vector instruction matches one rounded float32 operation of the Go
// loop, in the same order and without FMA, so the results are identical.
// BX walks the byte offset shared by all slices.

// func sgdAVX2(param, grad, buf *float32, n int, c *sgdConsts)
TEXT ·sgdAVX2(SB), NOSPLIT, $0-40
	MOVQ param+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ buf+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), AX
	VBROADCASTSS 0(AX), Y0  // sign
	VBROADCASTSS 4(AX), Y1  // wd
	VBROADCASTSS 8(AX), Y2  // mom
	VBROADCASTSS 12(AX), Y3 // damp = 1 − dampening
	VBROADCASTSS 16(AX), Y4 // lr
	MOVL 20(AX), R8         // hasWD
	MOVL 24(AX), R9         // momentum
	MOVL 28(AX), R10        // nesterov
	XORQ BX, BX
	SHLQ $2, CX

sgdLoop:
	CMPQ BX, CX
	JGE  sgdDone
	VMOVUPS (SI)(BX*1), Y5
	VMULPS  Y0, Y5, Y5      // g = sign·grad
	VMOVUPS (DI)(BX*1), Y6  // p
	TESTL   R8, R8
	JZ      sgdMomentum
	VMULPS  Y6, Y1, Y7
	VADDPS  Y7, Y5, Y5      // g += wd·p

sgdMomentum:
	TESTL   R9, R9
	JZ      sgdApply
	VMOVUPS (DX)(BX*1), Y7
	VMULPS  Y7, Y2, Y7      // mom·buf
	VMULPS  Y5, Y3, Y8      // damp·g
	VADDPS  Y8, Y7, Y7      // b
	VMOVUPS Y7, (DX)(BX*1)
	TESTL   R10, R10
	JZ      sgdHeavyBall
	VMULPS  Y7, Y2, Y8
	VADDPS  Y8, Y5, Y5      // g += mom·b (Nesterov)
	JMP     sgdApply

sgdHeavyBall:
	VMOVAPS Y7, Y5          // g = b

sgdApply:
	VMULPS  Y5, Y4, Y5      // lr·g
	VSUBPS  Y5, Y6, Y6      // p − lr·g
	VMOVUPS Y6, (DI)(BX*1)
	ADDQ    $32, BX
	JMP     sgdLoop

sgdDone:
	VZEROUPPER
	RET

// func adamAVX2(param, grad, m, v, vmax *float32, n int, c *adamConsts)
TEXT ·adamAVX2(SB), NOSPLIT, $0-56
	MOVQ param+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), DX
	MOVQ v+24(FP), R11
	MOVQ vmax+32(FP), R12
	MOVQ n+40(FP), CX
	MOVQ c+48(FP), AX
	VBROADCASTSS 0(AX), Y0  // sign
	VBROADCASTSS 4(AX), Y1  // decay
	VBROADCASTSS 8(AX), Y2  // l2
	VBROADCASTSS 12(AX), Y3 // b1
	VBROADCASTSS 16(AX), Y4 // c1
	VBROADCASTSS 20(AX), Y5 // b2
	VBROADCASTSS 24(AX), Y6 // c2
	VBROADCASTSS 28(AX), Y7 // bc2Sqrt
	VBROADCASTSS 32(AX), Y8 // eps
	VBROADCASTSS 36(AX), Y9 // stepSize
	MOVL 40(AX), R8         // hasL2
	MOVL 44(AX), R9         // amsgrad
	XORQ BX, BX
	SHLQ $2, CX

adamLoop:
	CMPQ BX, CX
	JGE  adamDone
	VMOVUPS (SI)(BX*1), Y10
	VMULPS  Y0, Y10, Y10    // g = sign·grad
	VMOVUPS (DI)(BX*1), Y11
	VMULPS  Y1, Y11, Y11    // p = p·decay
	TESTL   R8, R8
	JZ      adamMoments
	VMULPS  Y11, Y2, Y12
	VADDPS  Y12, Y10, Y10   // g += l2·p

adamMoments:
	VMOVUPS (DX)(BX*1), Y12
	VMULPS  Y12, Y3, Y12    // b1·m
	VMULPS  Y10, Y4, Y13    // c1·g
	VADDPS  Y13, Y12, Y12   // m
	VMOVUPS Y12, (DX)(BX*1)
	VMOVUPS (R11)(BX*1), Y13
	VMULPS  Y13, Y5, Y13    // b2·v
	VMULPS  Y10, Y6, Y14    // c2·g
	VMULPS  Y10, Y14, Y14   // (c2·g)·g
	VADDPS  Y14, Y13, Y13   // v
	VMOVUPS Y13, (R11)(BX*1)
	TESTL   R9, R9
	JZ      adamApply
	VMOVUPS (R12)(BX*1), Y14
	VMAXPS  Y13, Y14, Y13   // vmax > v ? vmax : v
	VMOVUPS Y13, (R12)(BX*1)

adamApply:
	VSQRTPS Y13, Y13
	VDIVPS  Y7, Y13, Y13    // √v / √(1 − β2^t)
	VADDPS  Y8, Y13, Y13    // + eps
	VMULPS  Y12, Y9, Y12    // stepSize·m
	VDIVPS  Y13, Y12, Y12
	VADDPS  Y12, Y11, Y11   // p + stepSize·m / denom
	VMOVUPS Y11, (DI)(BX*1)
	ADDQ    $32, BX
	JMP     adamLoop

adamDone:
	VZEROUPPER
	RET

// func sumSquaresAVX2(x *float32, n int) float64
// Σ x² in float64 over n elements, n a multiple of 16: each float is
// widened exactly, then squared and added with FMA in four accumulators.
TEXT ·sumSquaresAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	XORQ BX, BX
	SHLQ $2, CX

sqLoop:
	CMPQ BX, CX
	JGE  sqDone
	VCVTPS2PD 0(SI)(BX*1), Y4
	VCVTPS2PD 16(SI)(BX*1), Y5
	VCVTPS2PD 32(SI)(BX*1), Y6
	VCVTPS2PD 48(SI)(BX*1), Y7
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	VFMADD231PD Y6, Y6, Y2
	VFMADD231PD Y7, Y7, Y3
	ADDQ $64, BX
	JMP  sqLoop

sqDone:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VZEROUPPER
	MOVSD X0, ret+16(FP)
	RET
