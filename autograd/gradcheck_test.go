package autograd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/tensortest"
)

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 7)) }

func randn(rng *rand.Rand, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	t.FillNormal(rng, 0, 1)
	return t
}

// awayFromZero shifts values so none lies within margin of 0 (kinks of
// ReLU, Abs, MaxDim ties are avoided by the finite differences).
func awayFromZero(t *tensor.Tensor, margin float32) *tensor.Tensor {
	d := t.Data()
	for i, v := range d {
		if v >= 0 {
			d[i] = v + margin
		} else {
			d[i] = v - margin
		}
	}
	return t
}

// transposedCopy returns the values of t (2-D or more) as a view whose last
// two dimensions are transposed in storage: a non-contiguous input.
func transposedCopy(t *tensor.Tensor) *tensor.Tensor {
	s := append([]int(nil), t.Shape()...)
	n := len(s)
	s[n-1], s[n-2] = s[n-2], s[n-1]
	st := tensor.New(s...)
	v := st.Transpose(-1, -2)
	v.CopyFrom(t)
	return v
}

// slicedCopy returns the values of t as a view narrowed out of a wider
// buffer (non-contiguous along the last dimension).
func slicedCopy(t *tensor.Tensor) *tensor.Tensor {
	s := append([]int(nil), t.Shape()...)
	s[len(s)-1] += 2
	w := tensor.New(s...)
	v := w.Narrow(-1, 1, t.Dim(-1))
	v.CopyFrom(t)
	return v
}

// objective is Σ out·dout in float64.
func objective(out, dout *tensor.Tensor) float64 {
	o, d := out.Contiguous().Data(), dout.Contiguous().Data()
	var s float64
	for i := range o {
		s += float64(o[i]) * float64(d[i])
	}
	return s
}

// gradCheck compares Backward's gradients of Σ f(inputs)·dout with central
// finite differences, perturbing every element of every input through its
// (possibly strided) view.
func gradCheck(t *testing.T, rng *rand.Rand, inputs []*tensor.Tensor, f func(v []*Var) *Var) {
	t.Helper()
	const h = 1e-2
	vars := make([]*Var, len(inputs))
	for i, x := range inputs {
		vars[i] = NewVar(x, true)
	}
	out := f(vars)
	dout := randn(rng, out.Value.Shape()...)
	BackwardGrad(out, dout)
	eval := func() float64 {
		vs := make([]*Var, len(inputs))
		for i, x := range inputs {
			vs[i] = NewVar(x, false)
		}
		return objective(f(vs).Value, dout)
	}
	for i, x := range inputs {
		g := vars[i].Grad
		if g == nil {
			t.Fatalf("input %d: no gradient", i)
		}
		if !g.SameShape(x) {
			t.Fatalf("input %d: gradient shape %v, want %v", i, g.Shape(), x.Shape())
		}
		bad := 0
		tensortest.ForEachIndex(x.Shape(), func(idx []int) {
			old := x.At(idx...)
			x.Set(old+h, idx...)
			fp := eval()
			x.Set(old-h, idx...)
			fm := eval()
			x.Set(old, idx...)
			num := (fp - fm) / (2 * h)
			ana := float64(g.At(idx...))
			if math.Abs(num-ana) > 2e-3*(1+math.Abs(num)) {
				if bad < 4 {
					t.Errorf("input %d%v: analytic %.6g, numeric %.6g", i, idx, ana, num)
				}
				bad++
			}
		})
	}
}

// distinct fills each shape with a random permutation of values spaced
// 0.1 apart, so maxima have no near-ties for the finite differences.
func distinct(ss ...[]int) func(rng *rand.Rand) []*tensor.Tensor {
	return func(rng *rand.Rand) []*tensor.Tensor {
		out := make([]*tensor.Tensor, len(ss))
		for i, s := range ss {
			t := tensor.New(s...)
			for j, p := range rng.Perm(t.Len()) {
				t.Data()[j] = 0.1*float32(p) - 1
			}
			out[i] = t
		}
		return out
	}
}

type gradCase struct {
	name   string
	inputs func(rng *rand.Rand) []*tensor.Tensor
	f      func(v []*Var) *Var
}

func shapes(ss ...[]int) func(rng *rand.Rand) []*tensor.Tensor {
	return func(rng *rand.Rand) []*tensor.Tensor {
		out := make([]*tensor.Tensor, len(ss))
		for i, s := range ss {
			out[i] = randn(rng, s...)
		}
		return out
	}
}

func positive(ss ...[]int) func(rng *rand.Rand) []*tensor.Tensor {
	return func(rng *rand.Rand) []*tensor.Tensor {
		out := shapes(ss...)(rng)
		for _, t := range out {
			tensor.AddScalarInto(t, tensor.Abs(t), 0.5)
		}
		return out
	}
}

func kinkFree(ss ...[]int) func(rng *rand.Rand) []*tensor.Tensor {
	return func(rng *rand.Rand) []*tensor.Tensor {
		out := shapes(ss...)(rng)
		for _, t := range out {
			awayFromZero(t, 0.05)
		}
		return out
	}
}

func gradCases() []gradCase {
	ce := func(o CrossEntropyOptions, tgt []int64) func(v []*Var) *Var {
		return func(v []*Var) *Var { return CrossEntropy(v[0], tgt, o) }
	}
	bn := func(training bool) func(v []*Var) *Var {
		return func(v []*Var) *Var {
			rm, rv := tensor.New(3), tensor.Full(1, 3)
			return BatchNorm(v[0], v[1], v[2], rm, rv, BatchNormOptions{Training: training, Momentum: 0.1, Eps: 1e-5})
		}
	}
	return []gradCase{
		{"add", shapes([]int{3, 4}, []int{3, 4}), func(v []*Var) *Var { return Add(v[0], v[1]) }},
		{"add_broadcast", shapes([]int{4, 5}, []int{5}), func(v []*Var) *Var { return Add(v[0], v[1]) }},
		{"add_same_input", shapes([]int{3, 2}), func(v []*Var) *Var { return Add(v[0], v[0]) }},
		{"sub_broadcast", shapes([]int{3, 1}, []int{2, 1, 4}), func(v []*Var) *Var { return Sub(v[0], v[1]) }},
		{"mul_broadcast", shapes([]int{2, 3, 4}, []int{3, 1}), func(v []*Var) *Var { return Mul(v[0], v[1]) }},
		{"mul_scalar_tensor", shapes([]int{3, 4}, []int{}), func(v []*Var) *Var { return Mul(v[0], v[1]) }},
		{"div", func(rng *rand.Rand) []*tensor.Tensor {
			return []*tensor.Tensor{randn(rng, 2, 3), tensor.AddScalar(tensor.Abs(randn(rng, 3)), 0.5)}
		}, func(v []*Var) *Var { return Div(v[0], v[1]) }},
		{"add_scalar_scale_neg", shapes([]int{4}), func(v []*Var) *Var { return Neg(Scale(AddScalar(v[0], 2), 3)) }},
		{"exp", shapes([]int{3, 4}), func(v []*Var) *Var { return Exp(v[0]) }},
		{"log", positive([]int{3, 4}), func(v []*Var) *Var { return Log(v[0]) }},
		{"sqrt", positive([]int{3, 4}), func(v []*Var) *Var { return Sqrt(v[0]) }},
		{"abs", kinkFree([]int{3, 4}), func(v []*Var) *Var { return Abs(v[0]) }},
		{"square", shapes([]int{3, 4}), func(v []*Var) *Var { return Square(v[0]) }},
		{"pow", positive([]int{5}), func(v []*Var) *Var { return Pow(v[0], 2.5) }},
		{"tanh", shapes([]int{3, 4}), func(v []*Var) *Var { return Tanh(v[0]) }},
		{"sigmoid", shapes([]int{3, 4}), func(v []*Var) *Var { return Sigmoid(v[0]) }},
		{"relu", kinkFree([]int{3, 4}), func(v []*Var) *Var { return ReLU(v[0]) }},
		{"gelu", shapes([]int{3, 4}), func(v []*Var) *Var { return GELU(v[0]) }},
		{"gelu_tanh", shapes([]int{3, 4}), func(v []*Var) *Var { return GELUTanh(v[0]) }},
		{"silu", shapes([]int{3, 4}), func(v []*Var) *Var { return SiLU(v[0]) }},
		{"sum", shapes([]int{3, 4}), func(v []*Var) *Var { return Sum(v[0]) }},
		{"mean", shapes([]int{3, 4}), func(v []*Var) *Var { return Mean(v[0]) }},
		{"sum_dim0", shapes([]int{3, 4}), func(v []*Var) *Var { return SumDim(v[0], 0, false) }},
		{"mean_dim_last_keep", shapes([]int{2, 3, 4}), func(v []*Var) *Var { return MeanDim(v[0], -1, true) }},
		{"max_dim", distinct([]int{3, 5}), func(v []*Var) *Var { return MaxDim(v[0], 1, false) }},
		{"max_all", distinct([]int{3, 5}), func(v []*Var) *Var { return Max(v[0]) }},
		{"reshape_transpose_permute", shapes([]int{2, 3, 4}), func(v []*Var) *Var {
			return Mul(Permute(Transpose(Reshape(v[0], 4, 3, 2), 0, 2), 1, 0, 2), Reshape(v[0], 3, 2, 4))
		}},
		{"select", shapes([]int{3, 3, 4}), func(v []*Var) *Var { return Mul(Select(v[0], 1, 1), Select(v[0], 0, 2)) }},
		{"narrow_slice_unsqueeze_squeeze", shapes([]int{4, 5}), func(v []*Var) *Var {
			return Squeeze(Unsqueeze(Add(Narrow(v[0], 1, 1, 3), Slice(v[0], 1, 2, 5)), 0), 0)
		}},
		{"concat", shapes([]int{2, 3}, []int{2, 2}), func(v []*Var) *Var { return Concat(1, v[0], v[1], v[0]) }},
		{"contiguous_of_transpose", shapes([]int{3, 4}), func(v []*Var) *Var { return Contiguous(Transpose(v[0], 0, 1)) }},
		{"flatten", shapes([]int{2, 3, 2}), func(v []*Var) *Var { return Flatten(v[0]) }},
		{"matmul_2d", shapes([]int{3, 4}, []int{4, 5}), func(v []*Var) *Var { return MatMul(v[0], v[1]) }},
		{"matmul_batched", shapes([]int{2, 3, 4}, []int{2, 4, 5}), func(v []*Var) *Var { return MatMul(v[0], v[1]) }},
		{"matmul_batch_broadcast", shapes([]int{2, 3, 4}, []int{4, 2}), func(v []*Var) *Var { return MatMul(v[0], v[1]) }},
		{"matmul_2d_by_batched", shapes([]int{3, 4}, []int{2, 4, 2}), func(v []*Var) *Var { return MatMul(v[0], v[1]) }},
		{"matmul_transposed_view", shapes([]int{4, 3}, []int{5, 4}), func(v []*Var) *Var {
			return MatMul(Transpose(v[0], 0, 1), Transpose(v[1], 0, 1))
		}},
		{"linear", shapes([]int{4, 6}, []int{3, 6}, []int{3}), func(v []*Var) *Var { return Linear(v[0], v[1], v[2]) }},
		{"linear_3d_nobias", shapes([]int{2, 3, 5}, []int{4, 5}), func(v []*Var) *Var { return Linear(v[0], v[1], nil) }},
		{"linear_gelu_tanh", shapes([]int{4, 6}, []int{9, 6}, []int{9}), func(v []*Var) *Var { return LinearGELUTanh(v[0], v[1], v[2]) }},
		{"add_linear", shapes([]int{2, 3, 5}, []int{4, 5}, []int{4}, []int{2, 3, 4}), func(v []*Var) *Var { return AddLinear(v[3], v[0], v[1], v[2]) }},
		{"add_linear_nobias", shapes([]int{3, 5}, []int{4, 5}, []int{3, 4}), func(v []*Var) *Var { return AddLinear(v[2], v[0], v[1], nil) }},
		{"conv2d", shapes([]int{2, 2, 6, 5}, []int{3, 2, 3, 3}, []int{3}), func(v []*Var) *Var { return Conv2d(v[0], v[1], v[2], 1, 1) }},
		{"conv2d_stride2", shapes([]int{1, 2, 7, 7}, []int{2, 2, 3, 3}, []int{2}), func(v []*Var) *Var { return Conv2d(v[0], v[1], v[2], 2, 0) }},
		{"max_pool2d", distinct([]int{1, 2, 6, 6}), func(v []*Var) *Var { return MaxPool2d(v[0], 2, 2, 0) }},
		{"avg_pool2d", shapes([]int{1, 2, 7, 6}), func(v []*Var) *Var { return AvgPool2d(v[0], 3, 2, 1) }},
		{"softmax", shapes([]int{3, 5}), func(v []*Var) *Var { return Softmax(v[0], -1) }},
		{"softmax_dim0", shapes([]int{3, 5}), func(v []*Var) *Var { return Softmax(v[0], 0) }},
		{"log_softmax", shapes([]int{3, 5}), func(v []*Var) *Var { return LogSoftmax(v[0], 1) }},
		{"embedding", shapes([]int{5, 3}), func(v []*Var) *Var { return Embedding(v[0], []int64{1, 4, 1, 0, 2, 1}, 2, 3) }},
		{"layer_norm", shapes([]int{2, 3, 6}, []int{6}, []int{6}), func(v []*Var) *Var { return LayerNorm(v[0], v[1], v[2], 1e-5) }},
		{"layer_norm_no_affine", shapes([]int{4, 5}), func(v []*Var) *Var { return LayerNorm(v[0], nil, nil, 1e-5) }},
		// A pre-norm residual between two ops: h's gradient from the skip
		// path (a fresh tensor, from the Linear after it) is in hand when
		// LayerNorm's backward adds its own into it (LayerNormBackwardAdd).
		{"layer_norm_residual", shapes([]int{2, 3, 6}, []int{6}, []int{6}, []int{6, 6}, []int{6}), func(v []*Var) *Var {
			h := Linear(v[0], v[3], nil)
			return Linear(AddLinear(h, LayerNorm(h, v[1], v[2], 1e-5), v[3], v[4]), v[3], nil)
		}},
		{"batch_norm_train", shapes([]int{4, 3, 2, 2}, []int{3}, []int{3}), bn(true)},
		{"batch_norm_eval", shapes([]int{4, 3, 2, 2}, []int{3}, []int{3}), bn(false)},
		{"attention_causal", shapes([]int{2, 2, 5, 4}, []int{2, 2, 5, 4}, []int{2, 2, 5, 3}), func(v []*Var) *Var { return Attention(v[0], v[1], v[2], true) }},
		{"attention_full", shapes([]int{1, 4, 3}, []int{1, 6, 3}, []int{1, 6, 2}), func(v []*Var) *Var { return Attention(v[0], v[1], v[2], false) }},
		{"attention_qkv_causal", shapes([]int{2, 5, 3 * 6}), func(v []*Var) *Var { return AttentionQKV(v[0], 2, true) }},
		{"attention_qkv_full", shapes([]int{1, 4, 3 * 3}), func(v []*Var) *Var { return AttentionQKV(v[0], 1, false) }},
		{"cross_entropy_mean", shapes([]int{5, 4}), ce(CrossEntropyOptions{}, []int64{0, 3, 1, 1, 2})},
		{"cross_entropy_sum_smooth", shapes([]int{5, 4}), ce(CrossEntropyOptions{Reduction: ReduceSum, LabelSmoothing: 0.2}, []int64{0, 3, 1, 1, 2})},
		{"cross_entropy_none_ignore", shapes([]int{5, 4}), ce(CrossEntropyOptions{Reduction: ReduceNone, Ignore: true, IgnoreIndex: -100}, []int64{0, -100, 1, 1, 2})},
		{"cross_entropy_mean_ignore", shapes([]int{5, 4}), ce(CrossEntropyOptions{Ignore: true, IgnoreIndex: 3}, []int64{0, 3, 1, 1, 2})},
		{"mse_mean", shapes([]int{3, 4}, []int{3, 4}), func(v []*Var) *Var { return MSELoss(v[0], v[1], ReduceMean) }},
		{"mse_sum", shapes([]int{3, 4}, []int{3, 4}), func(v []*Var) *Var { return MSELoss(v[0], v[1], ReduceSum) }},
		{"mse_none", shapes([]int{3, 4}, []int{3, 4}), func(v []*Var) *Var { return MSELoss(v[0], v[1], ReduceNone) }},
	}
}

// TestGradCheck checks every differentiable op against finite
// differences, with contiguous, transposed and sliced input layouts.
func TestGradCheck(t *testing.T) {
	for ci, c := range gradCases() {
		for _, layout := range []string{"contig", "transposed", "sliced"} {
			t.Run(c.name+"/"+layout, func(t *testing.T) {
				rng := newRNG(uint64(ci))
				in := c.inputs(rng)
				for i, x := range in {
					switch {
					case layout == "transposed" && x.Dims() >= 2:
						in[i] = transposedCopy(x)
					case layout == "sliced" && x.Dims() >= 1:
						in[i] = slicedCopy(x)
					}
				}
				gradCheck(t, rng, in, c.f)
			})
		}
	}
}

// TestGradCheckDropout fixes the mask by reseeding the generator on every
// evaluation.
func TestGradCheckDropout(t *testing.T) {
	rng := newRNG(99)
	x := randn(rng, 4, 6)
	gradCheck(t, rng, []*tensor.Tensor{x}, func(v []*Var) *Var { return Dropout(v[0], 0.3, newRNG(5)) })
	y := Dropout(NewVar(tensor.Full(1, 1000), false), 0.25, newRNG(6)).Value.Data()
	zeros := 0
	for _, v := range y {
		switch v {
		case 0:
			zeros++
		case float32(1 / 0.75):
		default:
			t.Fatalf("dropout value %g, want 0 or %g", v, 1/0.75)
		}
	}
	if zeros < 200 || zeros > 300 {
		t.Errorf("dropout zeroed %d of 1000 at p=0.25", zeros)
	}
}

func ExampleBackward() {
	w := NewVar(tensor.FromSlice([]float32{1, 2, 3}, 3), true)
	x := NewVar(tensor.FromSlice([]float32{4, 5, 6}, 3), false)
	loss := Sum(Mul(w, x))
	Backward(loss)
	fmt.Println(loss.Value.Item(), w.Grad.Data())
	// Output: 32 [4 5 6]
}
