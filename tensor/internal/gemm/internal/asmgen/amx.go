package main

import "fmt"

// ---------------------------------------------------------------------------
// bfloat16: AMX (Advanced Matrix Extensions) tile kernel
//
// Go's assembler has no AMX mnemonics either, so LDTILECFG, TILERELEASE,
// TILEZERO, TILELOADD, TILESTORED and TDPBF16PS are encoded here (vex3)
// and emitted as BYTE directives; amx_test.go checks every encoding
// against GNU as's bytes for register choices exercising the VEX R, X and
// B bits, the SIB forms and 8- and 32-bit displacements.
//
// All six are VEX.128.W0 instructions of map 0F38 (Intel SDM vol. 2,
// "AMX"):
//
//	LDTILECFG  m512                     VEX.128.NP.0F38.W0 49 !(11):000:bbb
//	TILERELEASE                         VEX.128.NP.0F38.W0 49 C0
//	TILEZERO   tmm1                     VEX.128.F2.0F38.W0 49 11:rrr:000
//	TILELOADD  tmm1, sibmem             VEX.128.F2.0F38.W0 4B !(11):rrr:100
//	TILESTORED sibmem, tmm1             VEX.128.F3.0F38.W0 4B !(11):rrr:100
//	TDPBF16PS  tmm1, tmm2, tmm3         VEX.128.F3.0F38.W0 5C 11:rrr:bbb  (tmm3 in vvvv)
//
// sibmem is base + index·1 + disp, index holding the row stride in bytes.

const (
	vexNP = 0
	vex66 = 1
	vexF3 = 2
	vexF2 = 3
)

// gpr checks a general-purpose register number (Go's order: AX=0, CX,
// DX, BX, SP, BP, SI, DI, R8 … R15=15).
func gpr(r int) int {
	if r < 0 || r > 15 {
		panic(fmt.Sprintf("asmgen: general register %d out of range", r))
	}
	return r
}

func tmm(t int) int {
	if t < 0 || t > 7 {
		panic(fmt.Sprintf("asmgen: tile register %d out of range", t))
	}
	return t
}

// vex3 encodes a three-byte-VEX (C4) instruction of map 0F38, W0, L0:
// reg in ModRM.reg, vvvv (0 when unused), x and b the high bits of the
// SIB index and of the ModRM.rm or SIB base register, then opcode and the
// ModRM (with SIB and displacement) bytes in rest.
func vex3(pp byte, reg, vvvv, x, b int, opcode byte, rest ...byte) []byte {
	inv := func(r int) byte { return byte(^r>>3) & 1 }
	b1 := inv(reg)<<7 | inv(x)<<6 | inv(b)<<5 | 0b00010 // mmmmm = 0F38
	b2 := byte(^vvvv&15)<<3 | pp                        // W0, vvvv, L0, pp
	return append([]byte{0xc4, b1, b2, opcode}, rest...)
}

// mem returns the ModRM (with reg in its reg field), SIB and displacement
// bytes of base + index·1 + disp (index −1: none) and the index and base
// registers for the VEX X and B bits.
func mem(reg, base, index, disp int) (rest []byte, x, b int) {
	gpr(base)
	mod := byte(0)
	switch {
	case disp == 0 && base&7 != 5: // BP and R13 as base need a displacement
	case disp >= -128 && disp <= 127:
		mod = 1
	default:
		mod = 2
	}
	var d []byte
	switch mod {
	case 1:
		d = []byte{byte(int8(disp))}
	case 2:
		d = []byte{byte(disp), byte(disp >> 8), byte(disp >> 16), byte(disp >> 24)}
	}
	if index < 0 && base&7 != 4 { // no SIB needed
		return append([]byte{mod<<6 | byte(reg&7)<<3 | byte(base&7)}, d...), 0, base
	}
	idx := 4 // none
	if index >= 0 {
		if gpr(index) == 4 {
			panic("asmgen: SP cannot be an index register")
		}
		idx = index
	}
	rest = append([]byte{mod<<6 | byte(reg&7)<<3 | 4, byte(idx&7)<<3 | byte(base&7)}, d...)
	if index < 0 {
		return rest, 0, base
	}
	return rest, idx, base
}

// ldtilecfg encodes LDTILECFG disp(base): the 64-byte tile configuration.
func ldtilecfg(base, disp int) []byte {
	rest, x, b := mem(0, base, -1, disp)
	return vex3(vexNP, 0, 0, x, b, 0x49, rest...)
}

// tilerelease encodes TILERELEASE: tiles back to their initial state.
func tilerelease() []byte { return vex3(vexNP, 0, 0, 0, 0, 0x49, 0xc0) }

// tilezero encodes TILEZERO tmm(t).
func tilezero(t int) []byte { return vex3(vexF2, tmm(t), 0, 0, 0, 0x49, 0xc0|byte(t)<<3) }

// tileloadd encodes TILELOADD disp(base)(index*1), tmm(t): the tile's
// rows from base+disp, index bytes apart.
func tileloadd(t, base, index, disp int) []byte {
	rest, x, b := mem(tmm(t), base, index, disp)
	return vex3(vexF2, t, 0, x, b, 0x4b, rest...)
}

// tilestored encodes TILESTORED tmm(t), disp(base)(index*1).
func tilestored(t, base, index, disp int) []byte {
	rest, x, b := mem(tmm(t), base, index, disp)
	return vex3(vexF3, t, 0, x, b, 0x4b, rest...)
}

// tdpbf16ps encodes TDPBF16PS tmm(acc), tmm(a), tmm(b): for each row m
// and column n of acc (float32), acc[m][n] += Σ_k a[m].bf16[2k]·b[k].bf16[2n]
// + a[m].bf16[2k+1]·b[k].bf16[2n+1], over the k 32-bit words of a's rows.
func tdpbf16ps(acc, a, b int) []byte {
	return vex3(vexF3, tmm(acc), tmm(b), 0, 0, 0x5c, 0xc0|byte(acc)<<3|byte(tmm(a)))
}

// Go register numbers of the registers the kernel uses.
const (
	regAX, regCX, regDX, regBX = 0, 1, 2, 3
	regSI, regDI               = 6, 7
	regR8, regR11              = 8, 11
)

// genAMX emits the AMX bfloat16 kernel and xgetbv0.
//
// amxBF16x32x32 computes a 32×32 float32 block from bf16 operands packed
// for tiles, k16 blocks of 16 pairs of k deep, into out (32×32, row
// stride 128 bytes; written whole, not accumulated):
//
//	A: 32 rows of 16·k16 words, lda bytes apart; word (r, q) = A[r][2q] | A[r][2q+1]<<16
//	B: 16·k16 rows of 32 words, 128 bytes apart;  word (q, j) = B[2q][j] | B[2q+1][j]<<16
//	out[r][j] = Σ_q A[r][2q]·B[2q][j] + A[r][2q+1]·B[2q+1][j]
//
// with tiles tmm0-3 the four 16×16 accumulators (rows 0-15 and 16-31 ×
// columns 0-15 and 16-31), tmm4-5 the two A tiles (16 rows × 16 pairs),
// tmm6-7 the two B tiles (16 pairs × 16 columns). cfg is the 64-byte tile
// configuration (palette 1, tiles 0-7 of 16 rows × 64 bytes), loaded on
// entry; the tiles are released on return, so no tile state outlives the
// call. k16 ≥ 1.
//
// func amxBF16x32x32(k16 int, a *uint32, lda int, b *uint32, out *float32, cfg *byte)
func genAMX(e *emitter) {
	const name = "amxBF16x32x32"
	e.fn(name, "k16 int, a *uint32, lda int, b *uint32, out *float32, cfg *byte", 48)
	e.i("MOVQ cfg+40(FP), AX")
	e.raw(ldtilecfg(regAX, 0), "LDTILECFG (AX)")
	e.i("MOVQ k16+0(FP), CX")
	e.i("MOVQ a+8(FP), SI")
	e.i("MOVQ lda+16(FP), DX")
	e.i("MOVQ b+24(FP), BX")
	e.i("MOVQ out+32(FP), DI")
	e.i("MOVQ DX, R8")
	e.i("SHLQ $4, R8")
	e.i("ADDQ SI, R8") // A rows 16-31
	e.i("MOVQ $128, R11")
	for t := 0; t < 4; t++ {
		e.raw(tilezero(t), fmt.Sprintf("TILEZERO TMM%d", t))
	}
	e.l(name + "_loop")
	e.raw(tileloadd(4, regSI, regDX, 0), "TILELOADD (SI)(DX*1), TMM4")
	e.raw(tileloadd(5, regR8, regDX, 0), "TILELOADD (R8)(DX*1), TMM5")
	e.raw(tileloadd(6, regBX, regR11, 0), "TILELOADD (BX)(R11*1), TMM6")
	e.raw(tileloadd(7, regBX, regR11, 64), "TILELOADD 64(BX)(R11*1), TMM7")
	e.raw(tdpbf16ps(0, 4, 6), "TDPBF16PS TMM6, TMM4, TMM0")
	e.raw(tdpbf16ps(1, 4, 7), "TDPBF16PS TMM7, TMM4, TMM1")
	e.raw(tdpbf16ps(2, 5, 6), "TDPBF16PS TMM6, TMM5, TMM2")
	e.raw(tdpbf16ps(3, 5, 7), "TDPBF16PS TMM7, TMM5, TMM3")
	e.i("ADDQ $64, SI")
	e.i("ADDQ $64, R8")
	e.i("ADDQ $2048, BX")
	e.i("DECQ CX")
	e.i("JNZ %s_loop", name)
	e.raw(tilestored(0, regDI, regR11, 0), "TILESTORED TMM0, (DI)(R11*1)")
	e.raw(tilestored(1, regDI, regR11, 64), "TILESTORED TMM1, 64(DI)(R11*1)")
	e.raw(tilestored(2, regDI, regR11, 2048), "TILESTORED TMM2, 2048(DI)(R11*1)")
	e.raw(tilestored(3, regDI, regR11, 2112), "TILESTORED TMM3, 2112(DI)(R11*1)")
	e.raw(tilerelease(), "TILERELEASE")
	e.i("RET")
	e.buf.WriteString("\n")

	e.c("func xgetbv0() uint64: XCR0, the state components the OS has enabled")
	e.buf.WriteString("TEXT ·xgetbv0(SB), NOSPLIT, $0-8\n")
	e.i("XORL CX, CX")
	e.i("XGETBV")
	e.i("SHLQ $32, DX")
	e.i("ORQ DX, AX")
	e.i("MOVQ AX, ret+0(FP)")
	e.i("RET")
}
