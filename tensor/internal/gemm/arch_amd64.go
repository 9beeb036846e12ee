package gemm

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Implemented in kernel_avx512_amd64.s and kernel_avx2_amd64.s (generated
// by internal/asmgen, which documents each contract).

//go:noescape
func kernelAVX512x14x32(k int, a, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64)

//go:noescape
func kernelAVX512x14x32c(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64)

//go:noescape
func kernelAVX512x6x64(k int, a, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64)

//go:noescape
func kernelAVX512x6x64r(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64)

//go:noescape
func kernelAVX512x6x64ra(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64, row, mat *float32, ldm int)

// The 6×64 row-A kernel computing only the first 16, 32 or 48 columns of
// its 64-wide B sliver.
//
//go:noescape
func kernelAVX512x6x16rw(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64)

//go:noescape
func kernelAVX512x6x32rw(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64)

//go:noescape
func kernelAVX512x6x48rw(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64)

//go:noescape
func kernelAVX512x6x64c(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64)

//go:noescape
func dotAVX512x4x6(k int, a0, a1, a2, a3, b0, b1, b2, b3, b4, b5, acc *float32)

//go:noescape
func packT16(dst *float32, dstStride int, src *float32, srcStride int, rows, cols, width int)

//go:noescape
func packCopy32(dst *float32, dstStride int, src *float32, srcStride int, cols int, loadMask, storeMask uint32)

//go:noescape
func packRows6(dst, src *float32, ld, kc, full int, tailMask uint64)

//go:noescape
func packRows14(dst, src *float32, ld, kc, full int, tailMask uint64)

//go:noescape
func packRows32(dst, src *float32, ld, kc, full int, tailMask uint64)

//go:noescape
func packRows64(dst, src *float32, ld, kc, full int, tailMask uint64)

// packRows packs the n-wide, kc-deep block at src (row stride ld) into
// slivers of width w (6, 14, 32 or 64), reading it row by row.
func packRows(w int, dst, src []float32, ld, kc, n int) {
	full, tail := n/w, n%w
	f := packRows64
	switch w {
	case 6:
		f = packRows6
	case 14:
		f = packRows14
	case 32:
		f = packRows32
	}
	f(&dst[0], &src[0], ld, kc, full, bits(tail))
}

//go:noescape
func kernelAVX2x6x16(k int, a, b, c *float32, ldc int, alpha, beta float32, rows, cols int, masks *int32)

//go:noescape
func kernelAVX2x6x16r(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows, cols int, masks *int32)

//go:noescape
func kernelAVX2x6x16c(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows, cols int, masks *int32)

//go:noescape
func packT8(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, masks *int32)

//go:noescape
func packCopy16(dst *float32, dstStride int, src *float32, srcStride int, cols int, loadMask *int32)

//go:noescape
func packRows16(dst, src *float32, ld, kc, full int, tailMask *int32)

func hasAVX512() bool { return cpu.X86.HasAVX512F }
func hasAVX2() bool   { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// laneMasks is the AVX2 lane-mask table: &laneMasks[16-n] starts n words of
// all ones followed by zeros (0 <= n <= 16). Read-only.
var laneMasks = [32]int32{-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}

func laneMask(n int) *int32 { return &laneMasks[16-n] }

// bits returns a mask with the low n bits set (0 <= n <= 64).
func bits(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<uint(n) - 1
}

// at returns &s[i], or &s[0] when the routine will read nothing through it
// (i may then be out of range).
func at(s []float32, i int, reads bool) *float32 {
	if !reads {
		return unsafe.SliceData(s)
	}
	return &s[i]
}

// avx512Arch is the AVX-512F kernel family: a 14×32 micro-kernel (28 zmm
// accumulators, two B vectors, two broadcast registers) fed by 16×16
// in-register transposes and masked copies.
func avx512Arch() *arch {
	const mr, nr = 14, 32
	return &arch{
		name: KernelAVX512, mr: mr, nr: nr,
		mc: 14 * 24, kc: 256, nc: 4096,
		kernel: func(k int, a, b, c *float32, ldc int, alpha, beta float32, rows, cols int) {
			kernelAVX512x14x32(k, a, b, c, ldc, alpha, beta, rows, bits(cols))
		},
		colsA: func(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows, cols int) {
			kernelAVX512x14x32c(k, a, lda, b, c, ldc, alpha, beta, rows, bits(cols))
		},
		packA: packA16(mr), packB: packB16(nr),
	}
}

// packA16 returns the AVX-512 families' A packer for mr-row slivers:
// rows copied as they are from a transposed A, else 16×16 in-register
// transposes.
func packA16(mr int) func(dst, src []float32, ld int, trans bool, mc, kc int) {
	return func(dst, src []float32, ld int, trans bool, mc, kc int) {
		if trans {
			packRows(mr, dst, src, ld, kc, mc)
			return
		}
		for s := 0; s*mr < mc; s++ {
			packT16(&dst[s*mr*kc], mr, &src[s*mr*ld], ld, min(mr, mc-s*mr), kc, mr)
		}
	}
}

// packB16 returns the AVX-512 families' B packer for nr-column slivers:
// rows copied as they are, or a transposed B in 16×16 transposes.
func packB16(nr int) func(dst, src []float32, ld int, trans bool, kc, nc int) {
	return func(dst, src []float32, ld int, trans bool, kc, nc int) {
		if !trans {
			packRows(nr, dst, src, ld, kc, nc)
			return
		}
		for s := 0; s*nr < nc; s++ {
			cols := min(nr, nc-s*nr)
			out := dst[s*nr*kc:]
			for g := 0; g < nr; g += 16 {
				rows := max(0, min(16, cols-g))
				packT16(&out[g], nr, at(src, (s*nr+g)*ld, rows > 0), ld, rows, kc, 16)
			}
		}
	}
}

// avx2Arch is the AVX2+FMA kernel family: a 6×16 micro-kernel (12 ymm
// accumulators) fed by 8×8 in-register transposes and copies. Its packers
// store whole vectors and spill zeros past a block, hence the slack.
func avx2Arch() *arch {
	const mr, nr = 6, 16
	return &arch{
		name: KernelAVX2, mr: mr, nr: nr,
		mc: 6 * 24, kc: 256, nc: 4096,
		slack: 16, directMaxN: directMaxN,
		kernel: func(k int, a, b, c *float32, ldc int, alpha, beta float32, rows, cols int) {
			kernelAVX2x6x16(k, a, b, c, ldc, alpha, beta, rows, cols, laneMask(cols))
		},
		directA: func(trans bool, k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows, cols int) {
			if trans {
				kernelAVX2x6x16c(k, a, lda, b, c, ldc, alpha, beta, rows, cols, laneMask(cols))
			} else {
				kernelAVX2x6x16r(k, a, lda, b, c, ldc, alpha, beta, rows, cols, laneMask(cols))
			}
		},
		packA: func(dst, src []float32, ld int, trans bool, mc, kc int) {
			for s := 0; s*mr < mc; s++ {
				rows := min(mr, mc-s*mr)
				out := &dst[s*mr*kc]
				if trans {
					packCopy16(out, mr, &src[s*mr], ld, kc, laneMask(rows))
				} else {
					packT8(out, mr, &src[s*mr*ld], ld, rows, kc, &laneMasks[0])
				}
			}
		},
		packB: func(dst, src []float32, ld int, trans bool, kc, nc int) {
			if !trans {
				var tail *int32
				if nc%nr != 0 {
					tail = laneMask(nc % nr)
				}
				packRows16(&dst[0], &src[0], ld, kc, nc/nr, tail)
				return
			}
			for s := 0; s*nr < nc; s++ {
				cols := min(nr, nc-s*nr)
				out := dst[s*nr*kc:]
				for g := 0; g < nr; g += 8 {
					rows := max(0, min(8, cols-g))
					packT8(&out[g], nr, at(src, (s*nr+g)*ld, rows > 0), ld, rows, kc, &laneMasks[0])
				}
			}
		},
	}
}

// avx512WideArch is the AVX-512F family for short, wide products (few rows
// of C, many columns): a 6×64 micro-kernel (24 zmm accumulators, four B
// vectors), which wastes less on m = 6 or 16 than 14×32 does. Its direct
// variant reads A's rows in place (not a transposed A, which is packed).
func avx512WideArch() *arch {
	const mr, nr = 6, 64
	return &arch{
		name: KernelAVX512, mr: mr, nr: nr,
		mc: 6 * 40, kc: 128, nc: 4096,
		kernel: func(k int, a, b, c *float32, ldc int, alpha, beta float32, rows, cols int) {
			kernelAVX512x6x64(k, a, b, c, ldc, alpha, beta, rows, bits(cols))
		},
		directA: func(trans bool, k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows, cols int) {
			if trans {
				kernelAVX512x6x64c(k, a, lda, b, c, ldc, alpha, beta, rows, bits(cols))
			} else {
				kernelAVX512x6x64r(k, a, lda, b, c, ldc, alpha, beta, rows, bits(cols))
			}
		},
		directAddends: func(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows, cols int, row, mat *float32, ldm int) {
			kernelAVX512x6x64ra(k, a, lda, b, c, ldc, alpha, beta, rows, bits(cols), row, mat, ldm)
		},
		directMaxN: wideDirectMaxN, directAnyStride: true,
		packA: packA16(mr), packB: packB16(nr),
	}
}
