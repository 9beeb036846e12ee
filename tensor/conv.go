package tensor

import "math"

// 2-D convolution as GEMM over unfolded input windows. The input is
// unfolded (im2col) into a [C·KH·KW, positions] matrix ("col") a chunk of
// samples at a time, so the output is weight[O, C·KH·KW] @ col; the
// backward pass multiplies the output gradient by colᵀ for the weight
// gradient and folds weightᵀ @ dy back onto the input (col2im) for the
// input gradient. Stride-1 convolutions use the wide unfolding of
// conv_wide.go, whose rows are contiguous slices of the (padded) input;
// other strides the general unfolding of conv_im2col.go.

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
//
// The input is unfolded a chunk of samples at a time into a scratch matrix
// and multiplied by the weight with one GEMM per chunk, so no full-batch
// unfolded copy is ever built; the bias is added while the product is
// copied out.
func Conv2d(x, w, b *Tensor, stride, padding int) *Tensor {
	return conv2d("Conv2d", x, w, b, stride, padding, false)
}

// Conv2dReLU returns max(Conv2d(x, w, b, stride, padding), 0), computed in
// the same pass as the convolution (no intermediate tensor). Its gradients
// come from Conv2dReLUBackward.
func Conv2dReLU(x, w, b *Tensor, stride, padding int) *Tensor {
	return conv2d("Conv2dReLU", x, w, b, stride, padding, true)
}

func conv2d(op string, x, w, b *Tensor, stride, padding int, relu bool) *Tensor {
	g := convCheck(op, x, w, b, stride, padding)
	var bd []float32
	if b != nil {
		bd = b.Contiguous().Data()
	}
	y := New(g.N, w.shape[0], g.OH, g.OW)
	if g.N == 0 || y.Len() == 0 {
		return y
	}
	xd := x.Contiguous().Data()
	w2 := w.Contiguous().Reshape(w.shape[0], g.C*g.KH*g.KW)
	if stride == 1 {
		wideConvForward(y.Data(), xd, w2, bd, g, relu)
	} else {
		im2colConvForward(y.Data(), xd, w2, bd, g, relu)
	}
	return y
}

// Conv2dBackward returns the gradients of Conv2d given the output
// gradient dy [N, O, OH, OW], the input x and the weight w: dx (nil unless
// needInput), dw shaped like w, and db [O]. The unfolded input is
// recomputed chunk by chunk rather than kept from the forward pass.
func Conv2dBackward(dy, x, w *Tensor, stride, padding int, needInput bool) (dx, dw, db *Tensor) {
	return conv2dBackward("Conv2dBackward", dy, nil, x, w, stride, padding, needInput)
}

// Conv2dReLUBackward returns the gradients of Conv2dReLU given the output
// gradient dy, the output y = Conv2dReLU(x, w, b, stride, padding), the
// input x and the weight w, as Conv2dBackward: dy flows back only where y
// is positive (ReLU's gradient is 0 at 0, as PyTorch's).
func Conv2dReLUBackward(dy, y, x, w *Tensor, stride, padding int, needInput bool) (dx, dw, db *Tensor) {
	if !equalInts(y.shape, dy.shape) {
		panicf("Conv2dReLUBackward: output shape %v, output gradient shape %v: want equal", y.shape, dy.shape)
	}
	return conv2dBackward("Conv2dReLUBackward", dy, y, x, w, stride, padding, needInput)
}

func conv2dBackward(op string, dy, y, x, w *Tensor, stride, padding int, needInput bool) (dx, dw, db *Tensor) {
	g := convCheck(op, x, w, nil, stride, padding)
	O := w.shape[0]
	if want := []int{g.N, O, g.OH, g.OW}; !equalInts(dy.shape, want) {
		panicf("%s: output gradient shape %v, want %v", op, dy.shape, want)
	}
	dw, db = New(w.shape...), New(O)
	if needInput {
		dx = New(x.shape...)
	}
	if dy.Len() == 0 {
		return dx, dw, db
	}
	a := convGrads{
		dy: dy.Contiguous().Data(),
		xd: x.Contiguous().Data(),
		w2: w.Contiguous().Reshape(O, g.C*g.KH*g.KW),
		dw: dw.Reshape(O, g.C*g.KH*g.KW),
		db: db.Data(),
	}
	if y != nil {
		a.mask = y.Contiguous().Data()
	}
	if dx != nil {
		a.dx = dx.Data()
	}
	if stride == 1 {
		wideConvBackward(a, g)
	} else {
		im2colConvBackward(a, g)
	}
	return dx, dw, db
}

// convGrads holds the operands of a convolution's backward pass.
type convGrads struct {
	dy   []float32 // output gradient [N, O, OH, OW]
	mask []float32 // fused ReLU output [N, O, OH, OW]: dy counts only where it is > 0; nil for none
	xd   []float32 // input [N, C, H, W]
	w2   *Tensor   // weight [O, C·KH·KW]
	dw   *Tensor   // weight gradient [O, C·KH·KW], accumulated into
	db   []float32 // bias gradient [O], accumulated into
	dx   []float32 // input gradient [N, C, H, W], accumulated into; nil when not needed
}

// reluMaskRow writes g where y > 0 and 0 elsewhere (also where y is NaN or
// −0), branch-free: y ≥ 0 always holds for a ReLU output, so its bits are
// non-zero exactly when it is positive or NaN.
func reluMaskRow(dst, g, y []float32) {
	g = g[:len(dst)]
	y = y[:len(dst)]
	for i, v := range y {
		m := uint32(int32(-math.Float32bits(v)) >> 31)
		dst[i] = math.Float32frombits(math.Float32bits(g[i]) & m)
	}
}
