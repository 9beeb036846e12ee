package autograd

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/cohortml/cohort/tensor"
)

// Neural-network ops: convolution, pooling, softmax, embedding, dropout,
// normalisation and attention, each with a fused backward.

// Conv2d returns the 2-D convolution of x [N, C, H, W] with weight
// [O, C, KH, KW] and bias [O] (nil for none), equal stride and zero padding
// on both axes: [N, O, OH, OW].
func Conv2d(x, w, b *Var, stride, padding int) *Var {
	bv, inputs, dt := convOperands(x, w, b)
	y := tensor.Conv2dAs(dt, x.Value, w.Value, bv, stride, padding)
	xv, wv := x.Value, w.Value
	return record("Conv2d", y, inputs, func(g *tensor.Tensor, s *sink) {
		dx, dw, db := tensor.Conv2dBackwardAs(dt, g, xv, wv, stride, padding, s.need(0))
		deliverConv(s, b != nil, dx, dw, db)
	})
}

// convOperands returns a convolution's bias value (nil for none), its
// recorded inputs (x, w and b when there is one) and the dtype its
// products run in.
func convOperands(x, w, b *Var) (*tensor.Tensor, []*Var, tensor.DType) {
	var bv *tensor.Tensor
	inputs := []*Var{x, w}
	if b != nil {
		bv = b.Value
		inputs = append(inputs, b)
	}
	return bv, inputs, castOf(x.Value.Device(), x, w)
}

// Conv2dReLU returns max(Conv2d(x, w, b, stride, padding), 0) as one op:
// the ReLU is applied as the convolution's output is written, and its
// gradient mask is applied as the backward pass reads the output gradient,
// so no pre-activation tensor is kept. Values and gradients equal those of
// Conv2d followed by ReLU.
func Conv2dReLU(x, w, b *Var, stride, padding int) *Var {
	bv, inputs, dt := convOperands(x, w, b)
	y := tensor.Conv2dReLUAs(dt, x.Value, w.Value, bv, stride, padding)
	xv, wv := x.Value, w.Value
	return record("Conv2dReLU", y, inputs, func(g *tensor.Tensor, s *sink) {
		dx, dw, db := tensor.Conv2dReLUBackwardAs(dt, g, y, xv, wv, stride, padding, s.need(0))
		deliverConv(s, b != nil, dx, dw, db)
	})
}

// Conv2dReLUMaxPool2d returns MaxPool2d(Conv2dReLU(x, w, b, stride,
// padding), pool, pool, 0) as one op: the convolution's output is pooled
// while it is computed and never stored, and the backward pass routes the
// pooled gradient straight into the convolution's. Values and gradients
// equal those of the three ops in sequence (see
// tensor.Conv2dReLUMaxPool2d).
//
// On a device the convolution and the pooling run as two ops
// (Conv2dReLU, then MaxPool2d): equal values, and gradients equal up to
// the order of the bias gradient's sum.
func Conv2dReLUMaxPool2d(x, w, b *Var, stride, padding, pool int) *Var {
	if !x.Value.Device().IsCPU() {
		return MaxPool2d(Conv2dReLU(x, w, b, stride, padding), pool, pool, 0)
	}
	bv, inputs, dt := convOperands(x, w, b)
	y, arg := tensor.Conv2dReLUMaxPool2dAs(dt, x.Value, w.Value, bv, stride, padding, pool)
	xv, wv := x.Value, w.Value
	return record("Conv2dReLUMaxPool2d", y, inputs, func(g *tensor.Tensor, s *sink) {
		dx, dw, db := tensor.Conv2dReLUMaxPool2dBackwardAs(dt, g, y, arg, xv, wv, stride, padding, pool, s.need(0))
		deliverConv(s, b != nil, dx, dw, db)
	})
}

// deliverConv hands a convolution's gradients to the sink: the weight's
// and bias's first, so that their hooks can fire, then the input's.
func deliverConv(s *sink, bias bool, dx, dw, db *tensor.Tensor) {
	if s.need(1) {
		s.add(1, dw, true)
	}
	if bias && s.need(2) {
		s.add(2, db, true)
	}
	if dx != nil {
		s.add(0, dx, true)
	}
}

// MaxPool2d returns the maxima of kernel×kernel windows of x [N, C, H, W]
// at the given stride and padding.
func MaxPool2d(x *Var, kernel, stride, padding int) *Var {
	y, arg := tensor.MaxPool2d(x.Value, kernel, stride, padding)
	shape := x.Value.Shape()
	if !x.Value.Device().IsCPU() { // no indices there: the maxima are found again from x
		xv := x.Value
		return record("MaxPool2d", y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
			s.add(0, tensor.MaxPool2dBackwardFromInput(g, xv, kernel, stride, padding), true)
		})
	}
	return record("MaxPool2d", y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, tensor.MaxPool2dBackward(g, arg, shape), true)
	})
}

// AvgPool2d returns the means of kernel×kernel windows of x [N, C, H, W]
// at the given stride and padding (padding counts as zeros).
func AvgPool2d(x *Var, kernel, stride, padding int) *Var {
	shape := x.Value.Shape()
	return record("AvgPool2d", tensor.AvgPool2d(x.Value, kernel, stride, padding), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, tensor.AvgPool2dBackward(g, shape, kernel, stride, padding), true)
	})
}

// Softmax returns the softmax of x along dim.
func Softmax(x *Var, dim int) *Var {
	y := tensor.Softmax(x.Value, dim)
	return record("Softmax", y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, tensor.SoftmaxBackward(y, g, dim), true)
	})
}

// LogSoftmax returns log(softmax(x)) along dim, computed stably.
func LogSoftmax(x *Var, dim int) *Var {
	y := tensor.LogSoftmax(x.Value, dim)
	return record("LogSoftmax", y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, tensor.LogSoftmaxBackward(y, g, dim), true)
	})
}

// Embedding returns rows idx of the table w [V, D], shaped shape + [D]
// (shape defaults to [len(idx)]). The gradient scatters back into w's rows
// (repeated indices accumulate). An index outside [0, V) panics.
func Embedding(w *Var, idx []int64, shape ...int) *Var {
	if w.Value.Dims() != 2 {
		panic(fmt.Sprintf("autograd: Embedding: table shape %v, want [V, D]", w.Value.Shape()))
	}
	if len(shape) == 0 {
		shape = []int{len(idx)}
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n != len(idx) {
		panic(fmt.Sprintf("autograd: Embedding: %d indices for shape %v", len(idx), shape))
	}
	D := w.Value.Dim(1)
	rows := tensor.IndexRows(w.Value, idx)
	y := rows.Reshape(append(append([]int(nil), shape...), D)...)
	ids := append([]int64(nil), idx...)
	wShape := w.Value.Shape()
	v := record("Embedding", y, []*Var{w}, func(g *tensor.Tensor, s *sink) {
		g2 := g.Reshape(-1, D)
		if dst, overwrite := s.into(0); dst != nil {
			if overwrite {
				dst.Zero()
			}
			tensor.IndexAddRows(dst, ids, g2)
			s.settle(0)
			return
		}
		dw := tensor.NewOn(g.Device(), wShape...)
		tensor.IndexAddRows(dw, ids, g2)
		s.add(0, dw, true)
	})
	if v.node != nil {
		v.node.own = rows // fresh storage, not read by the backward
	}
	return v
}

// Dropout zeroes each element of x with probability p, drawing from rng,
// and scales the survivors by 1/(1−p). With p 0 it returns x itself. It
// panics unless 0 ≤ p < 1.
func Dropout(x *Var, p float64, rng *rand.Rand) *Var {
	if p < 0 || p >= 1 || math.IsNaN(p) {
		panic(fmt.Sprintf("autograd: Dropout: probability %g outside [0, 1)", p))
	}
	if p == 0 {
		return x
	}
	scale := float32(1 / (1 - p))
	mask := tensor.New(x.Value.Shape()...)
	md := mask.Data()
	for i := range md {
		if rng.Float64() >= p {
			md[i] = scale
		}
	}
	mask = mask.To(x.Value.Device()) // drawn on the host from rng
	return record("Dropout", tensor.Mul(x.Value, mask), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, tensor.Mul(g, mask), true)
	})
}

// affineOperands returns a normalisation's weight and bias values (nil for
// none), its recorded inputs (x, then w and b where given) and the
// indices of w and b among them (-1 for none).
func affineOperands(x, w, b *Var) (wv, bv *tensor.Tensor, inputs []*Var, wi, bi int) {
	inputs = []*Var{x}
	wi, bi = -1, -1
	if w != nil {
		wv, wi = w.Value, len(inputs)
		inputs = append(inputs, w)
	}
	if b != nil {
		bv, bi = b.Value, len(inputs)
		inputs = append(inputs, b)
	}
	return wv, bv, inputs, wi, bi
}

// LayerNorm normalises x over its last dimension (biased variance) and
// applies the affine weight w and bias b ([D] each, nil for none).
func LayerNorm(x, w, b *Var, eps float64) *Var {
	wv, bv, inputs, wi, bi := affineOperands(x, w, b)
	// On the CPU the row statistics are host slices; on a device they
	// stay there as tensors (meanT, rstdT).
	var y, meanT, rstdT *tensor.Tensor
	var mean, rstd []float32
	onCPU := x.Value.Device().IsCPU()
	if onCPU {
		y, mean, rstd = tensor.LayerNorm(x.Value, wv, bv, eps)
	} else {
		y, meanT, rstdT = tensor.LayerNormStats(x.Value, wv, bv, eps)
	}
	xv := x.Value
	var kept [2]*tensor.Tensor // the weight and bias gradients, for BackwardSplit's weight pass
	v := record("LayerNorm", y, inputs, func(g *tensor.Tensor, s *sink) {
		var dx, dw, db *tensor.Tensor
		switch {
		case kept[0] != nil || kept[1] != nil: // the weight pass: computed by the input pass
			dw, db = kept[0], kept[1]
			kept = [2]*tensor.Tensor{}
		case wv != nil && onCPU && s.accumulator(0) != nil:
			// The input's gradient so far (a residual stream's, from its
			// skip path) takes this one's in place, block by block.
			dw, db = tensor.LayerNormBackwardAdd(s.accumulator(0), g, xv, wv, mean, rstd)
			s.settle(0)
		case onCPU:
			dx, dw, db = tensor.LayerNormBackward(g, xv, wv, mean, rstd)
		default:
			dx, dw, db = tensor.LayerNormStatsBackward(g, xv, wv, meanT, rstdT)
		}
		if s.deferring() {
			kept = [2]*tensor.Tensor{dw, db}
			if bi >= 0 && db == nil {
				kept[1] = tensor.SumTo(g.Reshape(-1, bv.Dim(0)), bv.Dim(0))
			}
			if dx != nil {
				s.add(0, dx, true)
			}
			return
		}
		if wi >= 0 {
			s.add(wi, dw, true)
		}
		if bi >= 0 {
			if db == nil { // bias without weight: db = Σ g over rows
				db = tensor.SumTo(g.Reshape(-1, bv.Dim(0)), bv.Dim(0))
			}
			s.add(bi, db, true)
		}
		if dx != nil {
			s.add(0, dx, true)
		}
	})
	if v.node != nil {
		v.node.own = y // fresh storage, not read by the backward
	}
	return v
}

// BatchNormOptions configures BatchNorm.
type BatchNormOptions struct {
	// Training normalises with the batch statistics and updates the running
	// statistics; otherwise the running statistics normalise.
	Training bool
	// Momentum weights the new batch statistic in the running update:
	// running = (1−Momentum)·running + Momentum·batch (PyTorch's 0.1).
	Momentum float64
	// Eps is added to the variance (PyTorch's 1e-5).
	Eps float64
}

// BatchNorm normalises x [N, C, ...] per channel C and applies the affine
// weight w and bias b ([C], nil for none). runMean and runVar ([C]) hold
// the running statistics: updated in place in training mode (with the
// unbiased batch variance, as PyTorch) and used in evaluation mode; in
// training mode they may be nil.
func BatchNorm(x, w, b *Var, runMean, runVar *tensor.Tensor, o BatchNormOptions) *Var {
	xv := x.Value
	if xv.Dims() < 2 {
		panic(fmt.Sprintf("autograd: BatchNorm: input shape %v, want [N, C, ...]", xv.Shape()))
	}
	C := xv.Dim(1)
	for _, r := range []*tensor.Tensor{runMean, runVar} {
		if r != nil && (r.Dims() != 1 || r.Dim(0) != C || !r.IsContiguous()) {
			panic(fmt.Sprintf("autograd: BatchNorm: running statistic shape %v, want contiguous [%d] for input shape %v", r.Shape(), C, xv.Shape()))
		}
	}
	var mean, variance []float64
	if o.Training {
		mean, variance = tensor.BatchNormStats(xv)
		n := float64(xv.Len() / C)
		if runMean != nil {
			for c, m := range mean {
				runMean.Data()[c] = float32((1-o.Momentum)*float64(runMean.Data()[c]) + o.Momentum*m)
			}
		}
		if runVar != nil {
			unbias := n / math.Max(n-1, 1)
			for c, v := range variance {
				runVar.Data()[c] = float32((1-o.Momentum)*float64(runVar.Data()[c]) + o.Momentum*v*unbias)
			}
		}
	} else {
		if runMean == nil || runVar == nil {
			panic("autograd: BatchNorm: evaluation mode needs running statistics")
		}
		mean, variance = make([]float64, C), make([]float64, C)
		for c := 0; c < C; c++ {
			mean[c], variance[c] = float64(runMean.Data()[c]), float64(runVar.Data()[c])
		}
	}
	scale := make([]float64, C)
	for c, v := range variance {
		scale[c] = 1 / math.Sqrt(v+o.Eps)
	}
	wv, bv, inputs, wi, bi := affineOperands(x, w, b)
	y := tensor.BatchNormApply(xv, wv, bv, mean, scale)
	return record("BatchNorm", y, inputs, func(g *tensor.Tensor, s *sink) {
		dx, dw, db := tensor.BatchNormBackward(g, xv, wv, mean, scale, o.Training)
		if wi >= 0 {
			s.add(wi, dw, true)
		}
		if bi >= 0 {
			if db == nil {
				db = tensor.New(C)
				for c := 0; c < C; c++ {
					db.Data()[c] = tensor.Sum(g.Narrow(1, c, 1)).Item()
				}
			}
			s.add(bi, db, true)
		}
		if dx != nil {
			s.add(0, dx, true)
		}
	})
}

// Attention returns softmax(q·kᵀ/√d)·v for q [..., T, d], k [..., S, d]
// and v [..., S, dv] (batch dimensions broadcast), the core of multi-head
// attention. With causal, query i attends only to keys j ≤ i. The
// attention probabilities are kept for the backward pass.
func Attention(q, k, v *Var, causal bool) *Var {
	qv, kv, vv := q.Value, k.Value, v.Value
	if qv.Dims() < 2 || kv.Dims() < 2 || vv.Dims() < 2 || qv.Dim(-1) != kv.Dim(-1) || kv.Dim(-2) != vv.Dim(-2) {
		panic(fmt.Sprintf("autograd: Attention: shapes q %v, k %v, v %v (want [..., T, d], [..., S, d], [..., S, dv])", qv.Shape(), kv.Shape(), vv.Shape()))
	}
	scale := float32(1 / math.Sqrt(float64(qv.Dim(-1))))
	dt := castOf(qv.Device(), q, k, v)
	mm := func(a, b *tensor.Tensor) *tensor.Tensor { return tensor.MatMulAs(dt, a, b) }
	p := mm(qv, kv.Transpose(-1, -2))
	T, S := p.Dim(-2), p.Dim(-1)
	maskedSoftmaxRows(p.Data(), T, S, scale, causal)
	y := mm(p, vv)
	return record("Attention", y, []*Var{q, k, v}, func(g *tensor.Tensor, s *sink) {
		if s.need(2) {
			dv, _ := reduceTo(mm(p.Transpose(-1, -2), g), vv.Shape())
			s.add(2, dv, true)
		}
		if !s.need(0) && !s.need(1) {
			return
		}
		// dS = P·(dP − Σ_j dP·P)·scale, with dP = g·vᵀ; masked entries have
		// P = 0 and so get no gradient.
		ds := mm(g, vv.Transpose(-1, -2))
		dd, pd := ds.Data(), p.Data()
		for r := 0; r < len(pd)/max(S, 1); r++ {
			row, prow := dd[r*S:(r+1)*S], pd[r*S:(r+1)*S]
			var dot float64
			for j, pv := range prow {
				dot += float64(pv) * float64(row[j])
			}
			for j, pv := range prow {
				row[j] = pv * (row[j] - float32(dot)) * scale
			}
		}
		if s.need(0) {
			dq, _ := reduceTo(mm(ds, kv), qv.Shape())
			s.add(0, dq, true)
		}
		if s.need(1) {
			dk, _ := reduceTo(mm(ds.Transpose(-1, -2), qv), kv.Shape())
			s.add(1, dk, true)
		}
	})
}

// AttentionQKV returns multi-head attention computed straight from a
// fused projection qkv [B, T, 3·d] (queries | keys | values, head h at
// features h·hd:(h+1)·hd of each): y [B, T, d] with the heads concatenated,
// equal to splitting qkv into heads, Attention on each and concatenating,
// but without the permuted copies. The attention probabilities are kept
// for the backward pass, which returns the gradient of qkv in one tensor.
// qkv must be contiguous.
func AttentionQKV(qkv *Var, nHead int, causal bool) *Var {
	qv := qkv.Value
	if !qv.IsContiguous() {
		qv = qv.Contiguous()
	}
	dt := castOf(qv.Device(), qkv)
	y, p := tensor.AttentionQKVAs(dt, qv, nHead, causal)
	v := record("AttentionQKV", y, []*Var{qkv}, func(g *tensor.Tensor, s *sink) {
		s.add(0, tensor.AttentionQKVBackwardAs(dt, g, qv, p, nHead, causal), true)
	})
	if v.node != nil {
		v.node.own, v.node.scratch = y, p // both fresh; p is read by the backward alone
	}
	return v
}

// maskedSoftmaxRows replaces each length-S row of scores (row r is query
// r mod T) by softmax(scale·row), over keys j ≤ i only when causal.
func maskedSoftmaxRows(d []float32, T, S int, scale float32, causal bool) {
	if S == 0 {
		return
	}
	for r := 0; r < len(d)/S; r++ {
		row := d[r*S : (r+1)*S]
		n := S
		if causal {
			n = min(r%T+1, S)
		}
		m := math.Inf(-1)
		for _, v := range row[:n] {
			m = math.Max(m, float64(v*scale))
		}
		var sum float64
		for j, v := range row[:n] {
			e := math.Exp(float64(v*scale) - m)
			row[j] = float32(e)
			sum += e
		}
		inv := float32(1 / sum)
		for j := range row[:n] {
			row[j] *= inv
		}
		clear(row[n:])
	}
}
