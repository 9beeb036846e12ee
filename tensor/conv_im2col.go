package tensor

// The general convolution path, for any stride: the input windows are
// unfolded row by row (im2colInto) into a [C·KH·KW, nb·OH·OW] matrix for a
// chunk of nb samples, and the input gradient is folded back the same way
// (col2imAdd).

// im2colInto unfolds samples [n0, n0+nb) of the contiguous input xd into
// cd, laid out [C·KH·KW, nb·OH·OW]. Every entry of cd is written (padding
// as zeros), so cd may hold stale data.
func im2colInto(cd, xd []float32, g ConvGeom, n0, nb int) {
	L := g.OH * g.OW
	cols := nb * L
	s, p := g.Stride, g.Padding
	for c := 0; c < g.C; c++ {
		for ki := 0; ki < g.KH; ki++ {
			ohLo, ohHi := outRange(ki, s, p, g.H, g.OH)
			for kj := 0; kj < g.KW; kj++ {
				owLo, owHi := outRange(kj, s, p, g.W, g.OW)
				row := cd[((c*g.KH+ki)*g.KW+kj)*cols:][:cols]
				for n := 0; n < nb; n++ {
					plane := xd[((n0+n)*g.C+c)*g.H*g.W:][:g.H*g.W]
					dst := row[n*L : (n+1)*L]
					clear(dst[:ohLo*g.OW])
					clear(dst[ohHi*g.OW:])
					for oh := ohLo; oh < ohHi; oh++ {
						src := plane[(oh*s-p+ki)*g.W:][:g.W]
						drow := dst[oh*g.OW:][:g.OW]
						clear(drow[:owLo])
						clear(drow[owHi:])
						iw0 := owLo*s - p + kj
						if s == 1 {
							copy(drow[owLo:owHi], src[iw0:])
						} else {
							for ow, iw := owLo, iw0; ow < owHi; ow, iw = ow+1, iw+s {
								drow[ow] = src[iw]
							}
						}
					}
				}
			}
		}
	}
}

// col2imAdd is the adjoint of im2colInto: it adds cd ([C·KH·KW, nb·OH·OW])
// onto samples [n0, n0+nb) of dd.
func col2imAdd(dd, cd []float32, g ConvGeom, n0, nb int) {
	L := g.OH * g.OW
	cols := nb * L
	s, p := g.Stride, g.Padding
	for c := 0; c < g.C; c++ {
		for ki := 0; ki < g.KH; ki++ {
			ohLo, ohHi := outRange(ki, s, p, g.H, g.OH)
			for kj := 0; kj < g.KW; kj++ {
				owLo, owHi := outRange(kj, s, p, g.W, g.OW)
				row := cd[((c*g.KH+ki)*g.KW+kj)*cols:][:cols]
				for n := 0; n < nb; n++ {
					plane := dd[((n0+n)*g.C+c)*g.H*g.W:][:g.H*g.W]
					src := row[n*L : (n+1)*L]
					for oh := ohLo; oh < ohHi; oh++ {
						drow := plane[(oh*s-p+ki)*g.W:][:g.W]
						srow := src[oh*g.OW:][:g.OW]
						if s == 1 {
							d := drow[owLo-p+kj : owHi-p+kj]
							for i, v := range srow[owLo:owHi] {
								d[i] += v
							}
							continue
						}
						for ow, iw := owLo, owLo*s-p+kj; ow < owHi; ow, iw = ow+1, iw+s {
							drow[iw] += srow[ow]
						}
					}
				}
			}
		}
	}
}

// convChunk returns how many samples one GEMM of a convolution covers:
// enough output positions (about 1024 columns) to keep the GEMM efficient
// while the unfolded chunk stays cache-sized.
func convChunk(g ConvGeom) int {
	L := max(g.OH*g.OW, 1)
	return max(1, min(g.N, (1024+L-1)/L))
}

// im2colConvForward runs the convolution of xd by w2 [O, K] through the
// general unfolding, handing each chunk's product to ep.
func im2colConvForward(dt DType, xd []float32, w2 *Tensor, g ConvGeom, ep *convEpilogue) {
	O, K := w2.shape[0], w2.shape[1]
	L := g.OH * g.OW
	nb := convChunk(g)
	col, out := scratch(K*nb*L), scratch(O*nb*L)
	defer freeScratch(col, out)
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		cols := m * L
		im2colInto(col, xd, g, n0, m)
		GemmAs(dt, FromSlice(out[:O*cols], O, cols), w2, FromSlice(col[:K*cols], K, cols), 1, 0)
		ep.emit(out, chunkLayout{cols: cols, span: L, rowStride: g.OW}, g, O, n0, m)
	}
}

// im2colConvBackward accumulates a convolution's gradients through the
// general unfolding.
func im2colConvBackward(dt DType, pr *convPrologue, a convGrads, g ConvGeom) {
	O, K := a.w2.shape[0], a.w2.shape[1]
	L := g.OH * g.OW
	nb := convChunk(g)
	col, g2 := scratch(K*nb*L), scratch(O*nb*L)
	defer freeScratch(col, g2)
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		cols := m * L
		pr.gather(g2, chunkLayout{cols: cols, span: L, rowStride: g.OW}, g, a.db, n0, m)
		gt := FromSlice(g2[:O*cols], O, cols)
		ct := FromSlice(col[:K*cols], K, cols)
		im2colInto(col, a.xd, g, n0, m)
		GemmAs(dt, a.dw, gt, ct.T(), 1, 1) // dw += dy·colᵀ
		if a.dx != nil {
			GemmAs(dt, ct, a.w2.T(), gt, 1, 0) // dcol = wᵀ·dy, reusing col
			col2imAdd(a.dx, col, g, n0, m)
		}
	}
}
