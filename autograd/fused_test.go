package autograd

import (
	"testing"

	"github.com/cohortml/cohort/tensor"
)

// fusedCase is a fused op on inputs of the given shapes and the
// composition of the ops it fuses.
type fusedCase struct {
	name   string
	shapes [][]int
	fused  func(v []*Var) *Var
	plain  func(v []*Var) *Var
	tol    float32 // on values (relative to 1+|want|); gradients get max(tol, 1e-6)
}

// linearActCase is the case of fused, a Linear followed by act, with a
// bias when shapes has one (a third entry).
func linearActCase(name string, shapes [][]int, fused func(x, w, b *Var) *Var, act func(*Var) *Var) fusedCase {
	bias := func(v []*Var) *Var {
		if len(v) > 2 {
			return v[2]
		}
		return nil
	}
	return fusedCase{name, shapes,
		func(v []*Var) *Var { return fused(v[0], v[1], bias(v)) },
		func(v []*Var) *Var { return act(Linear(v[0], v[1], bias(v))) }, 0}
}

// TestFusedOps checks each fused op against the composition of the ops it
// fuses (which TestGradCheck covers): equal values and equal gradients for
// every input, including accumulation into existing gradients.
func TestFusedOps(t *testing.T) {
	cases := []fusedCase{
		{"conv2d_relu", [][]int{{3, 2, 7, 6}, {4, 2, 3, 3}, {4}},
			func(v []*Var) *Var { return Conv2dReLU(v[0], v[1], v[2], 1, 1) },
			func(v []*Var) *Var { return ReLU(Conv2d(v[0], v[1], v[2], 1, 1)) }, 0},
		{"conv2d_relu_stride2_nobias", [][]int{{2, 3, 9, 8}, {2, 3, 3, 3}},
			func(v []*Var) *Var { return Conv2dReLU(v[0], v[1], nil, 2, 0) },
			func(v []*Var) *Var { return ReLU(Conv2d(v[0], v[1], nil, 2, 0)) }, 0},
		{"conv2d_relu_maxpool2d", [][]int{{3, 1, 12, 12}, {3, 1, 5, 5}, {3}},
			func(v []*Var) *Var { return Conv2dReLUMaxPool2d(v[0], v[1], v[2], 1, 2, 2) },
			func(v []*Var) *Var { return MaxPool2d(ReLU(Conv2d(v[0], v[1], v[2], 1, 2)), 2, 2, 0) }, 0},
		{"conv2d_relu_maxpool3_odd", [][]int{{2, 2, 11, 10}, {3, 2, 2, 2}, {3}},
			func(v []*Var) *Var { return Conv2dReLUMaxPool2d(v[0], v[1], v[2], 1, 0, 3) },
			func(v []*Var) *Var { return MaxPool2d(ReLU(Conv2d(v[0], v[1], v[2], 1, 0)), 3, 3, 0) }, 0},
		linearActCase("linear_relu", [][]int{{5, 7}, {6, 7}, {6}}, LinearReLU, ReLU),
		linearActCase("linear_relu_3d_nobias", [][]int{{2, 3, 4}, {5, 4}}, LinearReLU, ReLU),
		linearActCase("linear_gelu_tanh", [][]int{{5, 7}, {9, 7}, {9}}, LinearGELUTanh, GELUTanh),
		linearActCase("linear_gelu_tanh_3d_nobias", [][]int{{2, 3, 8}, {16, 8}}, LinearGELUTanh, GELUTanh),
		// r + b is added before the product rather than after: float32
		// rounding differs.
		{"add_linear", [][]int{{2, 3, 6}, {4, 6}, {4}, {2, 3, 4}},
			func(v []*Var) *Var { return AddLinear(v[3], v[0], v[1], v[2]) },
			func(v []*Var) *Var { return Add(v[3], Linear(v[0], v[1], v[2])) }, 1e-6},
		{"add_linear_nobias", [][]int{{5, 6}, {4, 6}, {5, 4}},
			func(v []*Var) *Var { return AddLinear(v[2], v[0], v[1], nil) },
			func(v []*Var) *Var { return Add(v[2], Linear(v[0], v[1], nil)) }, 1e-6},
		// The residual's gradient is lent to it (sink.lend): an
		// intermediate residual that other ops also read sums their
		// gradients into the lent one; one that is also the projection's
		// input gets the projection's gradient summed in during the op's
		// own backward; in a chain each residual lends on to the next.
		{"add_linear_residual_read_again", [][]int{{16, 32}, {32, 32}, {32}, {16, 32}},
			func(v []*Var) *Var {
				h := GELUTanh(v[3])
				return Mul(Linear(AddLinear(h, v[0], v[1], v[2]), v[1], nil), h)
			},
			func(v []*Var) *Var {
				h := GELUTanh(v[3])
				return Mul(Linear(Add(h, Linear(v[0], v[1], v[2])), v[1], nil), h)
			}, 1e-5},
		{"add_linear_residual_lent_first", [][]int{{16, 32}, {32, 32}, {32, 32}, {32}, {8, 32}},
			func(v []*Var) *Var {
				h := GELUTanh(v[0])
				return Linear(AddLinear(h, Linear(h, v[1], nil), v[2], v[3]), v[4], nil)
			},
			func(v []*Var) *Var {
				h := GELUTanh(v[0])
				return Linear(Add(h, Linear(Linear(h, v[1], nil), v[2], v[3])), v[4], nil)
			}, 1e-5},
		{"add_linear_residual_is_input", [][]int{{16, 32}, {32, 32}, {32}},
			func(v []*Var) *Var { h := GELUTanh(v[0]); return AddLinear(h, h, v[1], v[2]) },
			func(v []*Var) *Var { h := GELUTanh(v[0]); return Add(h, Linear(h, v[1], v[2])) }, 1e-5},
		{"add_linear_chain", [][]int{{2, 8, 32}, {32, 32}, {32, 32}},
			func(v []*Var) *Var {
				h := GELUTanh(v[0])
				return AddLinear(AddLinear(h, h, v[1], nil), h, v[2], nil)
			},
			func(v []*Var) *Var {
				h := GELUTanh(v[0])
				return Add(Add(h, Linear(h, v[1], nil)), Linear(h, v[2], nil))
			}, 1e-5},
		{"attention_qkv_causal", [][]int{{2, 9, 3 * 8}},
			func(v []*Var) *Var { return AttentionQKV(v[0], 2, true) },
			func(v []*Var) *Var { return splitAttention(v[0], 2, true) }, 1e-5},
		{"attention_qkv_causal_gpt_mini", [][]int{{2, 64, 3 * 128}}, // T past the kernels' tiles, as GPT-mini
			func(v []*Var) *Var { return AttentionQKV(v[0], 4, true) },
			func(v []*Var) *Var { return splitAttention(v[0], 4, true) }, 1e-5},
		{"attention_qkv_full_one_head", [][]int{{3, 5, 3 * 4}},
			func(v []*Var) *Var { return AttentionQKV(v[0], 1, false) },
			func(v []*Var) *Var { return splitAttention(v[0], 1, false) }, 1e-5},
	}
	for ci, c := range cases {
		for _, accumulate := range []bool{false, true} {
			name := c.name
			if accumulate {
				name += "/accumulate"
			}
			t.Run(name, func(t *testing.T) {
				rng := newRNG(uint64(100 + ci))
				in := make([]*tensor.Tensor, len(c.shapes))
				for i, s := range c.shapes {
					in[i] = randn(rng, s...)
				}
				run := func(f func(v []*Var) *Var, dout *tensor.Tensor) (*tensor.Tensor, []*tensor.Tensor) {
					vars := make([]*Var, len(in))
					for i, x := range in {
						vars[i] = NewVar(x.Clone(), true)
						if accumulate {
							vars[i].Grad = tensor.Full(0.5, x.Shape()...)
						}
					}
					out := f(vars)
					if dout == nil {
						return out.Value, nil
					}
					BackwardGrad(out, dout)
					grads := make([]*tensor.Tensor, len(vars))
					for i, v := range vars {
						grads[i] = v.Grad
					}
					return out.Value, grads
				}
				want, _ := run(c.plain, nil)
				dout := randn(rng, want.Shape()...)
				want, wantGrads := run(c.plain, dout)
				got, gotGrads := run(c.fused, dout)
				assertSame(t, "value", got, want, c.tol)
				for i := range gotGrads {
					assertSame(t, "grad "+string(rune('0'+i)), gotGrads[i], wantGrads[i], max(c.tol, 1e-6))
				}
			})
		}
	}
}

func assertSame(t *testing.T, what string, got, want *tensor.Tensor, tol float32) {
	t.Helper()
	if !got.SameShape(want) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape(), want.Shape())
	}
	g, w := got.Contiguous().Data(), want.Contiguous().Data()
	for i := range g {
		d := g[i] - w[i]
		if d < 0 {
			d = -d
		}
		if d > tol*(1+max(w[i], -w[i])) || (g[i] != g[i]) != (w[i] != w[i]) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, g[i], w[i])
		}
	}
}

// splitAttention is AttentionQKV composed of plain ops: split qkv [B, T,
// 3d] into heads, Attention, concatenate the heads.
func splitAttention(qkv *Var, nHead int, causal bool) *Var {
	s := qkv.Value.Shape()
	B, T, d := s[0], s[1], s[2]/3
	heads := Permute(Reshape(qkv, B, T, 3, nHead, d/nHead), 2, 0, 3, 1, 4)
	y := Attention(Select(heads, 0, 0), Select(heads, 0, 1), Select(heads, 0, 2), causal)
	return Reshape(Permute(y, 0, 2, 1, 3), B, T, d)
}
