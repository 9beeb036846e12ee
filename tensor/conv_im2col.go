package tensor

// The general convolution path, for any stride: the input windows are
// unfolded row by row (im2colInto) into a [C·KH·KW, nb·OH·OW] matrix for a
// chunk of nb samples, and the input gradient is folded back the same way
// (col2imAdd).

// im2colInto unfolds samples [n0, n0+nb) of the contiguous input xd into
// cd, laid out [C·KH·KW, nb·OH·OW]. Every entry of cd is written (padding
// as zeros), so cd may hold stale data.
func im2colInto(cd, xd []float32, g ConvGeom, n0, nb int) { im2col(cd, xd, g, n0, nb, false) }

// col2imAdd is the adjoint of im2colInto: it adds cd ([C·KH·KW, nb·OH·OW])
// onto samples [n0, n0+nb) of dd.
func col2imAdd(dd, cd []float32, g ConvGeom, n0, nb int) { im2col(cd, dd, g, n0, nb, true) }

// im2col walks the unfolded matrix cd and the samples of xd it covers:
// it copies xd into cd (im2colInto), or with fold adds cd back onto xd
// (col2imAdd).
func im2col(cd, xd []float32, g ConvGeom, n0, nb int, fold bool) {
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
					crow := row[n*L : (n+1)*L]
					if !fold {
						clear(crow[:ohLo*g.OW])
						clear(crow[ohHi*g.OW:])
					}
					for oh := ohLo; oh < ohHi; oh++ {
						xrow := plane[(oh*s-p+ki)*g.W:][:g.W]
						orow := crow[oh*g.OW:][:g.OW]
						iw0 := owLo*s - p + kj
						switch {
						case fold && s == 1:
							d := xrow[iw0 : iw0+owHi-owLo]
							for i, v := range orow[owLo:owHi] {
								d[i] += v
							}
						case fold:
							for ow, iw := owLo, iw0; ow < owHi; ow, iw = ow+1, iw+s {
								xrow[iw] += orow[ow]
							}
						default:
							clear(orow[:owLo])
							clear(orow[owHi:])
							if s == 1 {
								copy(orow[owLo:owHi], xrow[iw0:])
							} else {
								for ow, iw := owLo, iw0; ow < owHi; ow, iw = ow+1, iw+s {
									orow[ow] = xrow[iw]
								}
							}
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
	nb, col, out := im2colScratch(g, K, O)
	defer freeScratch(col, out)
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		l := im2colLayout(g, m)
		im2colInto(col, xd, g, n0, m)
		GemmAs(dt, FromSlice(out[:O*l.cols], O, l.cols), w2, FromSlice(col[:K*l.cols], K, l.cols), 1, 0)
		ep.emit(out, l, g, O, n0, m)
	}
}

// im2colScratch returns the general path's chunk of samples (convChunk)
// and scratch for a chunk's unfolding (K rows) and product (O rows).
func im2colScratch(g ConvGeom, K, O int) (nb int, col, out []float32) {
	L := g.OH * g.OW
	nb = convChunk(g)
	return nb, scratch(K * nb * L), scratch(O * nb * L)
}

// im2colLayout is the layout of an unfolded chunk of m samples.
func im2colLayout(g ConvGeom, m int) chunkLayout {
	L := g.OH * g.OW
	return chunkLayout{cols: m * L, span: L, rowStride: g.OW}
}

// im2colConvBackward accumulates a convolution's gradients through the
// general unfolding.
func im2colConvBackward(dt DType, pr *convPrologue, a convGrads, g ConvGeom) {
	O, K := a.w2.shape[0], a.w2.shape[1]
	nb, col, g2 := im2colScratch(g, K, O)
	defer freeScratch(col, g2)
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		l := im2colLayout(g, m)
		pr.gather(g2, l, g, a.db, n0, m)
		gt := FromSlice(g2[:O*l.cols], O, l.cols)
		ct := FromSlice(col[:K*l.cols], K, l.cols)
		im2colInto(col, a.xd, g, n0, m)
		GemmAs(dt, a.dw, gt, ct.T(), 1, 1) // dw += dy·colᵀ
		if a.dx != nil {
			GemmAs(dt, ct, a.w2.T(), gt, 1, 0) // dcol = wᵀ·dy, reusing col
			col2imAdd(a.dx, col, g, n0, m)
		}
	}
}
