package vec

import "fmt"

// Direct convolution tiles: the inner loops of a stride-1 convolution
// computed straight from the (padded) input, without unfolding it into a
// matrix first. A kernel tap k reads the input at a fixed offset offs[k]
// from each output position (see tensor's wide unfolding), so the
// unfolded matrix's row k is x[offs[k]:]; these kernels read those rows in
// place. They exist only as AVX-512 assembly: HasConvTiles reports whether
// they run here, and callers use the unfolding and GEMM otherwise. The Go
// versions are their references (and a fallback that keeps the functions
// correct anywhere). Results match the references to float32 rounding (the
// assembly fuses multiply and add).

// HasConvTiles reports whether ConvTile6x64 and Dot4x6 run as assembly
// (AVX-512F).
func HasConvTiles() bool { return useAVX512 }

// ConvTile6x64 computes one tile of a convolution's output:
//
//	c[r·ldc + j] = Σ_kk a[6·kk + r] · x[offs[kk] + j]   for r < rows ≤ 6, j < cols ≤ 64
//
// a holds the weights of up to six output channels packed by tap (six
// values per tap, zero for channels past rows), offs one input offset per
// tap.
func ConvTile6x64(c []float32, ldc, rows, cols int, a []float32, offs []int, x []float32) {
	if rows < 1 || rows > 6 || cols < 1 || cols > 64 || len(a) < 6*len(offs) || ldc < cols {
		panic(fmt.Sprintf("vec: ConvTile6x64: rows %d, cols %d, ldc %d, %d weights for %d taps", rows, cols, ldc, len(a), len(offs)))
	}
	_ = c[(rows-1)*ldc+cols-1]
	for _, o := range offs {
		_ = x[o : o+cols]
	}
	if useAVX512 && len(offs) > 0 {
		var mask uint64 = 1<<cols - 1
		if cols == 64 {
			mask = ^uint64(0)
		}
		convTileAVX512(len(offs), &a[0], &offs[0], &x[0], &c[0], ldc, rows, mask)
		return
	}
	convTileGo(c, ldc, rows, cols, a, offs, x)
}

func convTileGo(c []float32, ldc, rows, cols int, a []float32, offs []int, x []float32) {
	for r := 0; r < rows; r++ {
		row := c[r*ldc:][:cols]
		clear(row)
		for kk, o := range offs {
			w := a[6*kk+r]
			for j, v := range x[o : o+cols] {
				row[j] += w * v
			}
		}
	}
}

// Dot4x6 accumulates the 4×6 dot products of rows a[i] and b[j] over m
// samples of n values each, the rows advancing by aStride and bStride
// elements from one sample to the next:
//
//	acc[(6i+j)·16 + l] += Σ_s Σ_{p<n, p mod 16 = l} a[i][s·aStride+p] · b[j][s·bStride+p]
//
// in 16 lane-wise partial sums per pair (len(acc) ≥ 384); Sum16 adds up a
// pair's lanes.
func Dot4x6(acc []float32, n, m int, a [4][]float32, aStride int, b [6][]float32, bStride int) {
	_ = acc[24*16-1]
	if n <= 0 || m <= 0 {
		return
	}
	for i := range a {
		_ = a[i][(m-1)*aStride+n-1]
	}
	for j := range b {
		_ = b[j][(m-1)*bStride+n-1]
	}
	if useAVX512 {
		dot4x6AVX512(n, m, &a[0][0], &a[1][0], &a[2][0], &a[3][0], &b[0][0], &b[1][0], &b[2][0], &b[3][0], &b[4][0], &b[5][0], aStride, bStride, &acc[0])
		return
	}
	for s := 0; s < m; s++ {
		for i := range a {
			ar := a[i][s*aStride:][:n]
			for j := range b {
				br := b[j][s*bStride:][:n]
				lanes := acc[(6*i+j)*16:][:16]
				for p, v := range ar {
					lanes[p%16] += v * br[p]
				}
			}
		}
	}
}

// Sum16 returns the sum of 16 lane-wise partial sums.
func Sum16(l []float32) float32 {
	l = l[:16]
	var s [8]float32
	for i := range s {
		s[i] = l[i] + l[i+8]
	}
	return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]))
}
