#include "textflag.h"

// Element-wise dst[i] = a[i] + b[i] with AVX2: 128 bytes per iteration,
// then 32, then one element at a time. The sums are the same IEEE
// additions as the Go loop, so results are bit-identical to it.

// func addF32AVX2(dst, a, b *float32, n int)
TEXT ·addF32AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
f32loop128:
	CMPQ CX, $32
	JLT  f32loop32
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VADDPS  (DX), Y0, Y0
	VADDPS  32(DX), Y1, Y1
	VADDPS  64(DX), Y2, Y2
	VADDPS  96(DX), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  f32loop128
f32loop32:
	CMPQ CX, $8
	JLT  f32tail
	VMOVUPS (SI), Y0
	VADDPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  f32loop32
f32tail:
	CMPQ CX, $0
	JEQ  f32done
	VMOVSS (SI), X0
	VADDSS (DX), X0, X0
	VMOVSS X0, (DI)
	ADDQ $4, SI
	ADDQ $4, DX
	ADDQ $4, DI
	DECQ CX
	JMP  f32tail
f32done:
	VZEROUPPER
	RET

// func addF64AVX2(dst, a, b *float64, n int)
TEXT ·addF64AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
f64loop128:
	CMPQ CX, $16
	JLT  f64loop32
	VMOVUPD (SI), Y0
	VMOVUPD 32(SI), Y1
	VMOVUPD 64(SI), Y2
	VMOVUPD 96(SI), Y3
	VADDPD  (DX), Y0, Y0
	VADDPD  32(DX), Y1, Y1
	VADDPD  64(DX), Y2, Y2
	VADDPD  96(DX), Y3, Y3
	VMOVUPD Y0, (DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, DI
	SUBQ $16, CX
	JMP  f64loop128
f64loop32:
	CMPQ CX, $4
	JLT  f64tail
	VMOVUPD (SI), Y0
	VADDPD  (DX), Y0, Y0
	VMOVUPD Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $4, CX
	JMP  f64loop32
f64tail:
	CMPQ CX, $0
	JEQ  f64done
	VMOVSD (SI), X0
	VADDSD (DX), X0, X0
	VMOVSD X0, (DI)
	ADDQ $8, SI
	ADDQ $8, DX
	ADDQ $8, DI
	DECQ CX
	JMP  f64tail
f64done:
	VZEROUPPER
	RET

// func addI64AVX2(dst, a, b *int64, n int)
TEXT ·addI64AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
i64loop128:
	CMPQ CX, $16
	JLT  i64loop32
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VPADDQ  (DX), Y0, Y0
	VPADDQ  32(DX), Y1, Y1
	VPADDQ  64(DX), Y2, Y2
	VPADDQ  96(DX), Y3, Y3
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, DI
	SUBQ $16, CX
	JMP  i64loop128
i64loop32:
	CMPQ CX, $4
	JLT  i64tail
	VMOVDQU (SI), Y0
	VPADDQ  (DX), Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $4, CX
	JMP  i64loop32
i64tail:
	CMPQ CX, $0
	JEQ  i64done
	MOVQ (SI), AX
	ADDQ (DX), AX
	MOVQ AX, (DI)
	ADDQ $8, SI
	ADDQ $8, DX
	ADDQ $8, DI
	DECQ CX
	JMP  i64tail
i64done:
	VZEROUPPER
	RET

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
