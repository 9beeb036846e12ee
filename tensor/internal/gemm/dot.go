package gemm

// The dot-product path: C = alpha·A·Bᵀ + beta·C with A (m×k) and B (n×k)
// both stored along k and k long next to m and n, as in the weight
// gradient of a convolution (dy·colᵀ, k = batch × pixels). Packing would
// copy both operands whole for little reuse; instead a kernel reads 4 rows
// of A and 6 rows of B in place and accumulates their 24 dot products in
// vector lanes, k in slabs that keep the rows in L2, and the lanes are
// summed at the end.

// dotKernel is the 4×6 dot-product kernel (see asmgen's genDot512).
type dotKernel func(k int, a0, a1, a2, a3, b0, b1, b2, b3, b4, b5, acc *float32)

const (
	dotR     = 4  // rows of A per tile
	dotS     = 6  // rows of B per tile
	dotLanes = 16 // accumulator lanes per dot product
	dotTile  = dotR * dotS * dotLanes
	dotL2    = 512 << 10 // bytes of A and B rows one k slab may span
	dotMinK  = 256
)

// useDot reports whether the product should take the dot-product path.
func (g *Impl) useDot(transA, transB bool, m, n, k int) bool {
	return g.dot != nil && !transA && transB && k >= dotMinK && k >= 4*(m+n)
}

// runDot runs the dot-product path, split over threads by blocks of C.
func (g *Impl) runDot(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	tm, tn := partition(m, n, k, g.threads, dotR, dotS)
	if tm*tn > 1 && 2*m*n*k < g.coldMin && !g.pool.warm(g.threads-1) {
		tm, tn = 1, 1
	}
	if tm*tn == 1 {
		g.dotBlock(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	g.pool.parallel(g.threads-1, tm*tn, func(t int) {
		ti, tj := t/tn, t%tn
		i0, i1 := split(m, dotR, tm, ti), split(m, dotR, tm, ti+1)
		j0, j1 := split(n, dotS, tn, tj), split(n, dotS, tn, tj+1)
		if i0 < i1 && j0 < j1 {
			g.dotBlock(i1-i0, j1-j0, k, alpha, a[i0*lda:], lda, b[j0*ldb:], ldb, beta, c[i0*ldc+j0:], ldc)
		}
	})
}

// dotBlock computes one m×n block of C on the calling goroutine.
func (g *Impl) dotBlock(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	ti, tj := (m+dotR-1)/dotR, (n+dotS-1)/dotS
	buf := g.bufs.Get().(*packBuf)
	defer g.bufs.Put(buf)
	buf.t = grow(buf.t, ti*tj*dotTile)
	acc := buf.t
	clear(acc)
	kc := max(dotMinK, dotL2/4/(m+n)/16*16)
	var ap [dotR]*float32
	var bp [dotS]*float32
	for pc := 0; pc < k; pc += kc {
		kk := min(kc, k-pc)
		for it := 0; it < ti; it++ {
			for r := range ap {
				ap[r] = &a[min(it*dotR+r, m-1)*lda+pc]
			}
			for jt := 0; jt < tj; jt++ {
				for s := range bp {
					bp[s] = &b[min(jt*dotS+s, n-1)*ldb+pc]
				}
				g.dot(kk, ap[0], ap[1], ap[2], ap[3], bp[0], bp[1], bp[2], bp[3], bp[4], bp[5], &acc[(it*tj+jt)*dotTile])
			}
		}
	}
	for i := 0; i < m; i++ {
		it, r := i/dotR, i%dotR
		row := c[i*ldc : i*ldc+n]
		for j := range row {
			jt, s := j/dotS, j%dotS
			lanes := acc[(it*tj+jt)*dotTile+(r*dotS+s)*dotLanes:][:dotLanes]
			var sum float32
			for _, v := range lanes {
				sum += v
			}
			if beta == 0 {
				row[j] = alpha * sum
			} else {
				row[j] = alpha*sum + beta*row[j]
			}
		}
	}
}
