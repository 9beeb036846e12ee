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
	xc := x.Contiguous()
	xd := xc.Data()
	L := g.OH * g.OW
	cols := g.N * L
	col := New(g.C*g.KH*g.KW, cols)
	cd := col.Data()
	s, p := g.Stride, g.Padding
	for c := 0; c < g.C; c++ {
		for ki := 0; ki < g.KH; ki++ {
			ohLo, ohHi := outRange(ki, s, p, g.H, g.OH)
			for kj := 0; kj < g.KW; kj++ {
				owLo, owHi := outRange(kj, s, p, g.W, g.OW)
				row := cd[((c*g.KH+ki)*g.KW+kj)*cols:][:cols]
				for n := 0; n < g.N; n++ {
					plane := xd[(n*g.C+c)*g.H*g.W:][:g.H*g.W]
					dst := row[n*L : (n+1)*L]
					for oh := ohLo; oh < ohHi; oh++ {
						ih := oh*s - p + ki
						src := plane[ih*g.W:][:g.W]
						drow := dst[oh*g.OW:][:g.OW]
						iw0 := owLo*s - p + kj
						if s == 1 {
							copy(drow[owLo:owHi], src[iw0:])
						} else {
							for ow, iw := owLo, iw0; ow < owHi; ow, iw = ow+1, iw+s {
								drow[ow] = src[iw]
							}
						}
					}
					// Rows and columns in the padding stay zero (New zeroed col).
				}
			}
		}
	}
	return col
}

// Col2ImAdd folds col [C·KH·KW, N·OH·OW] back onto dx [N, C, H, W] (which
// must be contiguous), adding every entry to the input pixel it was read
// from: the adjoint of Im2Col.
func Col2ImAdd(dx, col *Tensor, g ConvGeom) {
	dd := dx.Data()
	cc := col.Contiguous()
	cd := cc.Data()
	L := g.OH * g.OW
	cols := g.N * L
	s, p := g.Stride, g.Padding
	for c := 0; c < g.C; c++ {
		for ki := 0; ki < g.KH; ki++ {
			ohLo, ohHi := outRange(ki, s, p, g.H, g.OH)
			for kj := 0; kj < g.KW; kj++ {
				owLo, owHi := outRange(kj, s, p, g.W, g.OW)
				row := cd[((c*g.KH+ki)*g.KW+kj)*cols:][:cols]
				for n := 0; n < g.N; n++ {
					plane := dd[(n*g.C+c)*g.H*g.W:][:g.H*g.W]
					src := row[n*L : (n+1)*L]
					for oh := ohLo; oh < ohHi; oh++ {
						ih := oh*s - p + ki
						drow := plane[ih*g.W:][:g.W]
						srow := src[oh*g.OW:][:g.OW]
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

// Conv2d returns the 2-D cross-correlation of x [N, C, H, W] with weight
// [O, C, KH, KW] plus bias [O] (nil for none): [N, O, OH, OW], with equal
// stride and zero padding on both axes (PyTorch's conv2d).
func Conv2d(x, w, b *Tensor, stride, padding int) *Tensor {
	y, _ := Conv2dForward(x, w, b, stride, padding)
	return y
}

// Conv2dForward is Conv2d that also returns the unfolded input (Im2Col),
// which Conv2dBackward needs.
func Conv2dForward(x, w, b *Tensor, stride, padding int) (y, col *Tensor) {
	g := convCheck("Conv2d", x, w, b, stride, padding)
	O := w.shape[0]
	col = Im2Col(x, g)
	L := g.OH * g.OW
	y2 := New(O, g.N*L)
	Gemm(y2, w.Reshape(O, -1), col, 1, 0)
	y = New(g.N, O, g.OH, g.OW)
	yd, y2d := y.Data(), y2.Data()
	var bd []float32
	if b != nil {
		bd = b.Contiguous().Data()
	}
	for o := 0; o < O; o++ {
		var bias float32
		if bd != nil {
			bias = bd[o]
		}
		src := y2d[o*g.N*L:][:g.N*L]
		for n := 0; n < g.N; n++ {
			dst := yd[(n*O+o)*L:][:L]
			s := src[n*L:][:L]
			for i, v := range s {
				dst[i] = v + bias
			}
		}
	}
	return y, col
}

// Conv2dBackward returns the gradients of Conv2d given dy [N, O, OH, OW],
// the weight and the col saved by Conv2dForward: dx (nil unless needInput),
// dw shaped like the weight, and db [O].
func Conv2dBackward(dy, w, col *Tensor, xShape []int, stride, padding int, needInput bool) (dx, dw, db *Tensor) {
	if len(w.shape) != 4 {
		panicf("Conv2dBackward: weight shape %v, want [O, C, KH, KW]", w.shape)
	}
	g := NewConvGeom("Conv2dBackward", xShape, w.shape[2], w.shape[3], stride, padding)
	O := w.shape[0]
	L := g.OH * g.OW
	if want := []int{g.N, O, g.OH, g.OW}; !equalInts(dy.shape, want) {
		panicf("Conv2dBackward: output gradient shape %v, want %v", dy.shape, want)
	}
	// dy [N, O, L] -> dy2 [O, N·L], and db = row sums.
	dyd := dy.Contiguous().Data()
	dy2 := New(O, g.N*L)
	d2 := dy2.Data()
	db = New(O)
	dbd := db.Data()
	for n := 0; n < g.N; n++ {
		for o := 0; o < O; o++ {
			src := dyd[(n*O+o)*L:][:L]
			copy(d2[o*g.N*L+n*L:], src)
			var acc float64
			for _, v := range src {
				acc += float64(v)
			}
			dbd[o] += float32(acc)
		}
	}
	dw = New(w.shape...)
	Gemm(dw.Reshape(O, -1), dy2, col.T(), 1, 0)
	if needInput {
		dcol := New(col.shape...)
		Gemm(dcol, w.Reshape(O, -1).T(), dy2, 1, 0)
		dx = New(xShape...)
		Col2ImAdd(dx, dcol, g)
	}
	return dx, dw, db
}
