package tensor

// 2-D convolution as im2col + one GEMM over the whole batch: the input
// windows are unfolded into a [C·KH·KW, N·OH·OW] matrix ("col"), so the
// output is weight[O, C·KH·KW] @ col. The backward pass reuses col for the
// weight gradient and folds weightᵀ @ dy back into the input (col2im).

// ConvGeom is the geometry of a 2-D convolution or pooling window over an
// N×C×H×W input: kernel KH×KW, equal stride and zero padding on both axes,
// output OH×OW.
type ConvGeom struct {
	N, C, H, W      int
	KH, KW          int
	Stride, Padding int
	OH, OW          int
}

// NewConvGeom validates a window over input shape x ([N, C, H, W]) and
// computes the output size; op names the caller in panics.
func NewConvGeom(op string, x []int, kh, kw, stride, padding int) ConvGeom {
	if len(x) != 4 {
		panicf("%s: input shape %v, want [N, C, H, W]", op, x)
	}
	if kh <= 0 || kw <= 0 || stride <= 0 || padding < 0 {
		panicf("%s: kernel %dx%d, stride %d, padding %d: want kernel and stride > 0, padding ≥ 0", op, kh, kw, stride, padding)
	}
	g := ConvGeom{N: x[0], C: x[1], H: x[2], W: x[3], KH: kh, KW: kw, Stride: stride, Padding: padding}
	hp, wp := g.H+2*padding, g.W+2*padding
	if hp < kh || wp < kw {
		panicf("%s: kernel %dx%d larger than padded input %dx%d (input shape %v, padding %d)", op, kh, kw, hp, wp, x, padding)
	}
	g.OH = (hp-kh)/stride + 1
	g.OW = (wp-kw)/stride + 1
	return g
}

// outRange returns the output positions [lo, hi) whose input coordinate
// o·stride − padding + k falls inside [0, size).
func outRange(k, stride, padding, size, out int) (int, int) {
	// o·s ≥ p − k  and  o·s ≤ size − 1 + p − k
	lo := 0
	if d := padding - k; d > 0 {
		lo = (d + stride - 1) / stride
	}
	hi := out
	if d := size - 1 + padding - k; d < 0 {
		hi = 0
	} else if h := d/stride + 1; h < hi {
		hi = h
	}
	if lo > hi {
		lo = hi
	}
	return lo, hi
}

// Im2Col unfolds x [N, C, H, W] into a new [C·KH·KW, N·OH·OW] matrix: row
// (c, i, j) holds input pixel (c, oh·s−p+i, ow·s−p+j) of every output
// position (n, oh, ow), zero where that falls in the padding.
func Im2Col(x *Tensor, g ConvGeom) *Tensor {
	col := New(g.C*g.KH*g.KW, g.N*g.OH*g.OW)
	im2colInto(col.Data(), x.Contiguous().Data(), g, 0, g.N)
	return col
}

// Col2ImAdd folds col [C·KH·KW, N·OH·OW] back onto dx [N, C, H, W] (which
// must be contiguous), adding every entry to the input pixel it was read
// from: the adjoint of Im2Col.
func Col2ImAdd(dx, col *Tensor, g ConvGeom) {
	col2imAdd(dx.Data(), col.Contiguous().Data(), g, 0, g.N)
}

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

func convCheck(op string, x, w, b *Tensor, stride, padding int) ConvGeom {
	if len(w.shape) != 4 {
		panicf("%s: weight shape %v, want [O, C, KH, KW]", op, w.shape)
	}
	g := NewConvGeom(op, x.shape, w.shape[2], w.shape[3], stride, padding)
	if w.shape[1] != g.C {
		panicf("%s: input shape %v has %d channels, weight shape %v expects %d", op, x.shape, g.C, w.shape, w.shape[1])
	}
	if b != nil && (len(b.shape) != 1 || b.shape[0] != w.shape[0]) {
		panicf("%s: bias shape %v, want [%d] for weight shape %v", op, b.shape, w.shape[0], w.shape)
	}
	return g
}

// convChunk returns how many samples one GEMM of a convolution covers:
// enough output positions (about 1024 columns) to keep the GEMM efficient
// while the unfolded chunk stays cache-sized.
func convChunk(g ConvGeom) int {
	L := max(g.OH*g.OW, 1)
	return max(1, min(g.N, (1024+L-1)/L))
}

// Conv2d returns the 2-D cross-correlation of x [N, C, H, W] with weight
// [O, C, KH, KW] plus bias [O] (nil for none): [N, O, OH, OW], with equal
// stride and zero padding on both axes (PyTorch's conv2d).
//
// The input is unfolded (im2col) a chunk of samples at a time into a
// scratch matrix and multiplied by the weight with one GEMM per chunk, so
// no full-batch unfolded copy is ever built.
func Conv2d(x, w, b *Tensor, stride, padding int) *Tensor {
	g := convCheck("Conv2d", x, w, b, stride, padding)
	O, K := w.shape[0], g.C*g.KH*g.KW
	L := g.OH * g.OW
	xd := x.Contiguous().Data()
	w2 := w.Contiguous().Reshape(O, K)
	var bd []float32
	if b != nil {
		bd = b.Contiguous().Data()
	}
	y := New(g.N, O, g.OH, g.OW)
	yd := y.Data()
	nb := convChunk(g)
	col := make([]float32, K*nb*L)
	out := make([]float32, O*nb*L)
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		cols := m * L
		im2colInto(col, xd, g, n0, m)
		Gemm(FromSlice(out[:O*cols], O, cols), w2, FromSlice(col[:K*cols], K, cols), 1, 0)
		for o := 0; o < O; o++ {
			var bias float32
			if bd != nil {
				bias = bd[o]
			}
			src := out[o*cols:][:cols]
			for n := 0; n < m; n++ {
				dst := yd[((n0+n)*O+o)*L:][:L]
				for i, v := range src[n*L : (n+1)*L] {
					dst[i] = v + bias
				}
			}
		}
	}
	return y
}

// Conv2dBackward returns the gradients of Conv2d given the output
// gradient dy [N, O, OH, OW], the input x and the weight w: dx (nil unless
// needInput), dw shaped like w, and db [O]. The unfolded input is
// recomputed chunk by chunk rather than kept from the forward pass.
func Conv2dBackward(dy, x, w *Tensor, stride, padding int, needInput bool) (dx, dw, db *Tensor) {
	g := convCheck("Conv2dBackward", x, w, nil, stride, padding)
	O, K := w.shape[0], g.C*g.KH*g.KW
	L := g.OH * g.OW
	if want := []int{g.N, O, g.OH, g.OW}; !equalInts(dy.shape, want) {
		panicf("Conv2dBackward: output gradient shape %v, want %v", dy.shape, want)
	}
	xd := x.Contiguous().Data()
	dyd := dy.Contiguous().Data()
	w2 := w.Contiguous().Reshape(O, K)
	dw, db = New(w.shape...), New(O)
	dw2, dbd := dw.Reshape(O, K), db.Data()
	if needInput {
		dx = New(x.shape...)
	}
	nb := convChunk(g)
	col := make([]float32, K*nb*L)
	g2 := make([]float32, O*nb*L)
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		cols := m * L
		// dy chunk [m, O, L] -> g2 [O, m·L]; db = its row sums.
		for n := 0; n < m; n++ {
			for o := 0; o < O; o++ {
				src := dyd[((n0+n)*O+o)*L:][:L]
				copy(g2[o*cols+n*L:], src)
				var acc float64
				for _, v := range src {
					acc += float64(v)
				}
				dbd[o] += float32(acc)
			}
		}
		gt := FromSlice(g2[:O*cols], O, cols)
		ct := FromSlice(col[:K*cols], K, cols)
		im2colInto(col, xd, g, n0, m)
		Gemm(dw2, gt, ct.T(), 1, 1) // dw += dy·colᵀ
		if needInput {
			Gemm(ct, w2.T(), gt, 1, 0) // dcol = wᵀ·dy, reusing col
			col2imAdd(dx.Data(), col, g, n0, m)
		}
	}
	return dx, dw, db
}
