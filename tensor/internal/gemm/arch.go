package gemm

// arch is one family of cohort kernels: a micro-kernel computing an mr×nr
// tile of C from packed slivers, the packing routines producing those
// slivers, and the cache-blocking sizes tuned for it.
//
// Packed layouts (for a block of kc steps along k):
//
//	A sliver: kc groups of mr values, group p holding op(A)[i0+r][p0+p] for r < mr
//	B sliver: kc groups of nr values, group p holding op(B)[p0+p][j0+c] for c < nr
//
// Rows and columns past the edge of the matrix are packed as zeros, so the
// micro-kernel always runs full-size and the store masks out the edges.
type arch struct {
	name   string
	mr, nr int
	// mc×kc is the packed A block (L2), kc×nr the packed B sliver (L1),
	// kc×nc the packed B panel.
	mc, kc, nc int
	// slack is how many float32 past a packed block the packing routines
	// may write (zeros).
	slack int

	// kernel computes C[r][c] = alpha·Σ_p a[p][r]·b[p][c] + beta·C[r][c]
	// for r < rows, c < cols, reading C only when beta != 0. a and b point
	// at packed slivers of k steps; c at C's first element of the tile.
	kernel func(k int, a, b, c *float32, ldc int, alpha, beta float32, rows, cols int)
	// directA, when set, is the kernel's variant reading a full mr-row
	// sliver of op(A) in place instead of packed: A[r][p] at a[r*lda+p],
	// or with trans at a[p*lda+r], for r < mr and p < k, all read.
	directA func(trans bool, k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows, cols int)
	// directAddends, when set, is directA for an A that is not transposed,
	// adding the tile's Addends before it stores it: row at the tile's
	// first column and mat at its first element (row stride ldm), each nil
	// when absent.
	directAddends func(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows, cols int, row, mat *float32, ldm int)
	// colsA, when set, is the kernel's variant reading a full mr-row
	// sliver of a transposed A in place (op(A)[r][p] at a[p*lda+r], all
	// mr read) with B packed, for a family without a directA.
	colsA func(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows, cols int)
	// directMaxN is the widest product whose A is read in place (see
	// useDirect).
	directMaxN int
	// directAnyStride: the in-place kernel reads A's rows at any stride,
	// aliasing ones included (see useDirect).
	directAnyStride bool

	// packA packs the mc×kc block of op(A) whose first element is src[0]
	// (A[i0][p0] or, transposed, A[p0][i0]) into ceil(mc/mr) slivers.
	packA func(dst, src []float32, ld int, trans bool, mc, kc int)
	// packB packs the kc×nc block of op(B) whose first element is src[0]
	// into ceil(nc/nr) slivers.
	packB func(dst, src []float32, ld int, trans bool, kc, nc int)
}

// goArch is the portable kernel: plain Go, used where no assembly kernel
// applies and as the reference the assembly packers are tested against.
func goArch() *arch {
	const mr, nr = 4, 4
	return &arch{
		name: KernelGo, mr: mr, nr: nr,
		mc: 128, kc: 256, nc: 2048,
		kernel: kernelGo4x4,
		packA: func(dst, src []float32, ld int, trans bool, mc, kc int) {
			packGo(dst, src, ld, !trans, mc, kc, mr)
		},
		packB: func(dst, src []float32, ld int, trans bool, kc, nc int) {
			packGo(dst, src, ld, trans, nc, kc, nr)
		},
	}
}

// packGo packs the n×kc block whose slivers run along n, w values wide:
//
//	dst[s*w*kc + p*w + r] = X(s*w + r, p)
//
// where X(i, p) = src[i*ld + p] when rowsAlongN ("the n index selects
// rows of the source"), else src[p*ld + i]. Positions with s*w+r >= n are
// zero.
func packGo(dst, src []float32, ld int, rowsAlongN bool, n, kc, w int) {
	for s := 0; s*w < n; s++ {
		out := dst[s*w*kc : (s+1)*w*kc]
		rows := min(w, n-s*w)
		for p := 0; p < kc; p++ {
			g := out[p*w : p*w+w]
			for r := 0; r < rows; r++ {
				i := s*w + r
				if rowsAlongN {
					g[r] = src[i*ld+p]
				} else {
					g[r] = src[p*ld+i]
				}
			}
			clear(g[rows:])
		}
	}
}

// kernelGo4x4 is the portable 4×4 micro-kernel.
func kernelGo4x4(k int, a, b, c *float32, ldc int, alpha, beta float32, rows, cols int) {
	as := unsafeSlice(a, 4*k)
	bs := unsafeSlice(b, 4*k)
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 float32
	for len(as) >= 4 && len(bs) >= 4 {
		av, bv := (*[4]float32)(as), (*[4]float32)(bs)
		as, bs = as[4:], bs[4:]
		a0, a1, a2, a3 := av[0], av[1], av[2], av[3]
		b0, b1, b2, b3 := bv[0], bv[1], bv[2], bv[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	t := [4][4]float32{
		{c00, c01, c02, c03},
		{c10, c11, c12, c13},
		{c20, c21, c22, c23},
		{c30, c31, c32, c33},
	}
	cs := unsafeSlice(c, (rows-1)*ldc+cols)
	for r := 0; r < rows; r++ {
		row := cs[r*ldc : r*ldc+cols]
		for j := range row {
			if beta == 0 {
				row[j] = alpha * t[r][j]
			} else {
				row[j] = alpha*t[r][j] + beta*row[j]
			}
		}
	}
}
