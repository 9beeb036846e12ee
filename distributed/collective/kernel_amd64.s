#include "textflag.h"

// Element-wise dst[i] = a[i] + b[i] with AVX2: 128 bytes per iteration,
// then 32, then one element at a time. The sums are the same IEEE
// additions as the Go loop, so results are bit-identical to it.

// ADDVEC is the body of the three adds, for elements of size bytes:
// VMOV and VADD move and add a vector of them, N128 and N32 are how many
// fill 128 and 32 bytes, and ONE adds one element at (SI) and (DX) into
// (DI).
#define ADDVEC(VMOV, VADD, N128, N32, size, ONE) \
	MOVQ dst+0(FP), DI \
	MOVQ a+8(FP), SI \
	MOVQ b+16(FP), DX \
	MOVQ n+24(FP), CX \
loop128: \
	CMPQ CX, $N128 \
	JLT  loop32 \
	VMOV (SI), Y0 \
	VMOV 32(SI), Y1 \
	VMOV 64(SI), Y2 \
	VMOV 96(SI), Y3 \
	VADD (DX), Y0, Y0 \
	VADD 32(DX), Y1, Y1 \
	VADD 64(DX), Y2, Y2 \
	VADD 96(DX), Y3, Y3 \
	VMOV Y0, (DI) \
	VMOV Y1, 32(DI) \
	VMOV Y2, 64(DI) \
	VMOV Y3, 96(DI) \
	ADDQ $128, SI \
	ADDQ $128, DX \
	ADDQ $128, DI \
	SUBQ $N128, CX \
	JMP  loop128 \
loop32: \
	CMPQ CX, $N32 \
	JLT  tail \
	VMOV (SI), Y0 \
	VADD (DX), Y0, Y0 \
	VMOV Y0, (DI) \
	ADDQ $32, SI \
	ADDQ $32, DX \
	ADDQ $32, DI \
	SUBQ $N32, CX \
	JMP  loop32 \
tail: \
	CMPQ CX, $0 \
	JEQ  done \
	ONE \
	ADDQ $size, SI \
	ADDQ $size, DX \
	ADDQ $size, DI \
	DECQ CX \
	JMP  tail \
done: \
	VZEROUPPER \
	RET

#define ONEF32 \
	VMOVSS (SI), X0 \
	VADDSS (DX), X0, X0 \
	VMOVSS X0, (DI)

#define ONEF64 \
	VMOVSD (SI), X0 \
	VADDSD (DX), X0, X0 \
	VMOVSD X0, (DI)

#define ONEI64 \
	MOVQ (SI), AX \
	ADDQ (DX), AX \
	MOVQ AX, (DI)

// func addF32AVX2(dst, a, b *float32, n int)
TEXT ·addF32AVX2(SB), NOSPLIT, $0-32
	ADDVEC(VMOVUPS, VADDPS, 32, 8, 4, ONEF32)

// func addF64AVX2(dst, a, b *float64, n int)
TEXT ·addF64AVX2(SB), NOSPLIT, $0-32
	ADDVEC(VMOVUPD, VADDPD, 16, 4, 8, ONEF64)

// func addI64AVX2(dst, a, b *int64, n int)
TEXT ·addI64AVX2(SB), NOSPLIT, $0-32
	ADDVEC(VMOVDQU, VPADDQ, 16, 4, 8, ONEI64)

// Element-wise dst[i] = dst[i] / d with AVX2 (Avg's final step): the same
// correctly rounded IEEE divisions as the Go loop, so bit-identical to it.

// func divF32AVX2(dst *float32, d float32, n int)
TEXT ·divF32AVX2(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	VBROADCASTSS d+8(FP), Y4
	MOVQ         n+16(FP), CX
div32loop128:
	CMPQ    CX, $32
	JLT     div32loop32
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VDIVPS  Y4, Y0, Y0
	VDIVPS  Y4, Y1, Y1
	VDIVPS  Y4, Y2, Y2
	VDIVPS  Y4, Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	SUBQ    $32, CX
	JMP     div32loop128
div32loop32:
	CMPQ    CX, $8
	JLT     div32tail
	VMOVUPS (DI), Y0
	VDIVPS  Y4, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     div32loop32
div32tail:
	CMPQ   CX, $0
	JEQ    div32done
	VMOVSS (DI), X0
	VDIVSS X4, X0, X0
	VMOVSS X0, (DI)
	ADDQ   $4, DI
	DECQ   CX
	JMP    div32tail
div32done:
	VZEROUPPER
	RET
