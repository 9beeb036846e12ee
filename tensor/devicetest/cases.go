package devicetest

import (
	"fmt"
	"math/rand/v2"

	"github.com/cohortml/cohort/tensor"
)

// ins builds an inputs function from shapes of N(0, 1) draws.
func ins(shapes ...[]int) func(r *rand.Rand) []*tensor.Tensor {
	return func(r *rand.Rand) []*tensor.Tensor {
		out := make([]*tensor.Tensor, len(shapes))
		for i, s := range shapes {
			if s != nil {
				out[i] = randn(r, s...)
			}
		}
		return out
	}
}

func outs(ts ...*tensor.Tensor) []*tensor.Tensor { return ts }

// cases returns every op check: each op family over several shapes,
// including odd, empty and strided or broadcast operands.
func cases() []opCase {
	var cs []opCase
	add := func(name string, inputs func(*rand.Rand) []*tensor.Tensor, run func([]*tensor.Tensor) []*tensor.Tensor) {
		cs = append(cs, opCase{name: name, inputs: inputs, run: run})
	}

	// Elementwise, binary: same shapes, broadcasting, views, in place.
	binary := map[string]func(a, b *tensor.Tensor) *tensor.Tensor{
		"add": tensor.Add, "sub": tensor.Sub, "mul": tensor.Mul, "div": tensor.Div,
		"maximum": tensor.Maximum, "minimum": tensor.Minimum,
	}
	pairs := [][2][]int{{{0}, {0}}, {{1}, {1}}, {{7}, {7}}, {{3, 5}, {3, 5}}, {{3, 5}, {5}}, {{4, 1, 3}, {2, 1}}, {{2, 3, 4}, {}}, {{0, 3}, {3}}}
	for _, name := range []string{"add", "sub", "mul", "div", "maximum", "minimum"} {
		f := binary[name]
		for _, p := range pairs {
			add(fmt.Sprintf("binary/%s/%v%v", name, p[0], p[1]), ins(p[0], p[1]), func(in []*tensor.Tensor) []*tensor.Tensor {
				return outs(f(in[0], in[1]))
			})
		}
	}
	add("binary/add/transposed", ins([]int{5, 3}, []int{3, 5}), func(in []*tensor.Tensor) []*tensor.Tensor {
		return outs(tensor.Add(in[0].T(), in[1]))
	})
	add("binary/mul-into/in-place", ins([]int{6, 4}, []int{4}), func(in []*tensor.Tensor) []*tensor.Tensor {
		tensor.MulInto(in[0], in[0], in[1])
		return outs(in[0])
	})
	for _, shape := range [][]int{{0}, {9}, {3, 17}} {
		add(fmt.Sprintf("binary/add-scaled/%v", shape), ins(shape, shape), func(in []*tensor.Tensor) []*tensor.Tensor {
			tensor.AddScaled(in[0], -0.37, in[1])
			return outs(in[0])
		})
	}
	add("binary/add-scaled/into-narrowed-view", ins([]int{4, 6}, []int{4, 3}), func(in []*tensor.Tensor) []*tensor.Tensor {
		tensor.AddScaled(in[0].Narrow(1, 2, 3), 2, in[1])
		return outs(in[0])
	})
	add("copy/from-transposed", ins([]int{3, 4}, []int{4, 3}), func(in []*tensor.Tensor) []*tensor.Tensor {
		in[0].CopyFrom(in[1].T())
		return outs(in[0], in[1].T().Contiguous(), in[1].Permute(1, 0).Clone())
	})
	add("copy/broadcast-fill-zero", ins([]int{2, 3, 4}, []int{3, 1}), func(in []*tensor.Tensor) []*tensor.Tensor {
		in[0].CopyFrom(in[1])
		z := in[0].Clone()
		z.Narrow(2, 1, 2).Fill(0.5)
		w := in[0].Clone()
		w.Zero()
		return outs(in[0], z, w, tensor.FullOn(in[0].Device(), 3, 2, 2))
	})

	// Elementwise, unary.
	unary := []struct {
		name string
		f    func(a *tensor.Tensor) *tensor.Tensor
		pos  bool // needs positive inputs
	}{
		{"neg", tensor.Neg, false}, {"exp", tensor.Exp, false}, {"log", tensor.Log, true}, {"sqrt", tensor.Sqrt, true},
		{"tanh", tensor.Tanh, false}, {"sigmoid", tensor.Sigmoid, false}, {"relu", tensor.ReLU, false},
		{"abs", tensor.Abs, false}, {"gelu", tensor.GELU, false}, {"gelu-tanh", tensor.GELUTanh, false},
		{"silu", tensor.SiLU, false}, {"square", tensor.Square, false},
		{"add-scalar", func(a *tensor.Tensor) *tensor.Tensor { return tensor.AddScalar(a, 0.25) }, false},
		{"scale", func(a *tensor.Tensor) *tensor.Tensor { return tensor.Scale(a, -3) }, false},
		{"pow", func(a *tensor.Tensor) *tensor.Tensor { return tensor.Pow(a, 1.5) }, true},
	}
	for _, u := range unary {
		for _, shape := range [][]int{{0}, {1}, {13}, {5, 7}} {
			inputs := ins(shape)
			if u.pos {
				inputs = func(r *rand.Rand) []*tensor.Tensor { return outs(randu(r, 0.01, 4, shape...)) }
			}
			f := u.f
			add(fmt.Sprintf("unary/%s/%v", u.name, shape), inputs, func(in []*tensor.Tensor) []*tensor.Tensor {
				return outs(f(in[0]))
			})
		}
	}
	add("unary/scale-into/transposed", ins([]int{4, 6}), func(in []*tensor.Tensor) []*tensor.Tensor {
		out := tensor.NewOn(in[0].Device(), 6, 4)
		tensor.ScaleInto(out, in[0].T(), 0.5)
		tensor.ScaleInto(in[0], in[0], 2) // in place
		return outs(out, in[0])
	})
	for _, shape := range [][]int{{0}, {7}, {33, 65}} {
		add(fmt.Sprintf("relu-backward/%v", shape), ins(shape, shape), func(in []*tensor.Tensor) []*tensor.Tensor {
			y := tensor.ReLU(in[1])
			return outs(tensor.ReLUBackward(in[0], y))
		})
		add(fmt.Sprintf("gelu-tanh-backward/%v", shape), ins(shape, shape), func(in []*tensor.Tensor) []*tensor.Tensor {
			return outs(tensor.GELUTanhBackward(in[0], in[1]))
		})
	}
	add("gelu-tanh-backward-sum/[9 5]", ins([]int{9, 5}, []int{9, 5}, []int{5}), func(in []*tensor.Tensor) []*tensor.Tensor {
		dst := tensor.NewOn(in[0].Device(), 9, 5)
		tensor.GELUTanhBackwardSumInto(dst, in[0], in[1], in[2])
		return outs(dst, in[2])
	})

	// Matrix products.
	for _, mkn := range [][3]int{{1, 1, 1}, {3, 5, 7}, {0, 4, 3}, {4, 0, 3}, {4, 3, 0}, {17, 33, 9}, {64, 65, 63}} {
		m, k, n := mkn[0], mkn[1], mkn[2]
		add(fmt.Sprintf("matmul/m=%d/k=%d/n=%d", m, k, n), ins([]int{m, k}, []int{k, n}), func(in []*tensor.Tensor) []*tensor.Tensor {
			return outs(tensor.MatMul(in[0], in[1]))
		})
		add(fmt.Sprintf("gemm-transposed-accumulate/m=%d/k=%d/n=%d", m, k, n), ins([]int{k, m}, []int{n, k}, []int{m, n}), func(in []*tensor.Tensor) []*tensor.Tensor {
			tensor.Gemm(in[2], in[0].T(), in[1].T(), 0.5, 1)
			return outs(in[2])
		})
	}
	add("matmul/batched-broadcast", ins([]int{2, 3, 4, 5}, []int{5, 6}), func(in []*tensor.Tensor) []*tensor.Tensor {
		return outs(tensor.MatMul(in[0], in[1]), tensor.MatMul(in[0], in[0].Transpose(-1, -2)))
	})
	for _, c := range []struct {
		rows, in, out int
		bias, res     bool
		act           tensor.Activation
	}{
		{1, 1, 1, false, false, tensor.Identity}, {5, 7, 3, true, false, tensor.Identity}, {8, 16, 12, true, true, tensor.Identity},
		{9, 11, 13, true, false, tensor.ReLUAct}, {6, 8, 10, true, false, tensor.GELUTanhAct}, {6, 8, 10, true, true, tensor.GELUTanhAct},
		{0, 4, 3, true, false, tensor.ReLUAct},
	} {
		c := c
		shapes := [][]int{{c.rows, c.in}, {c.out, c.in}, nil, nil}
		if c.bias {
			shapes[2] = []int{c.out}
		}
		if c.res {
			shapes[3] = []int{c.rows, c.out}
		}
		add(fmt.Sprintf("linear/rows=%d/in=%d/out=%d/bias=%v/residual=%v/act=%d", c.rows, c.in, c.out, c.bias, c.res, c.act), ins(shapes...), func(in []*tensor.Tensor) []*tensor.Tensor {
			dev := in[0].Device()
			h := tensor.NewOn(dev, c.rows, c.out)
			var y *tensor.Tensor
			if c.act == tensor.GELUTanhAct {
				y = tensor.NewOn(dev, c.rows, c.out)
			}
			tensor.LinearInto(h, in[0], in[1], in[2], in[3], y, c.act)
			return outs(h, y)
		})
	}

	// Reductions.
	for _, p := range [][2][]int{{{0}, {}}, {{7}, {}}, {{4, 5}, {5}}, {{4, 5}, {4, 1}}, {{3, 4, 5}, {1, 4, 1}}, {{64, 33}, {33}}} {
		add(fmt.Sprintf("sum-into/%v->%v", p[0], p[1]), ins(p[0], p[1]), func(in []*tensor.Tensor) []*tensor.Tensor {
			tensor.SumInto(in[1], in[0])
			return outs(in[1])
		})
	}
	add("sum-mean-sumdim", ins([]int{3, 4, 5}), func(in []*tensor.Tensor) []*tensor.Tensor {
		return outs(tensor.Sum(in[0]), tensor.Mean(in[0]), tensor.SumDim(in[0], 1, false), tensor.MeanDim(in[0], -1, true), tensor.SumTo(in[0], 4, 1))
	})

	// Softmax along each dimension, forward and backward.
	for _, shape := range [][]int{{1, 1}, {3, 7}, {2, 3, 5}, {0, 4}} {
		for dim := range len(shape) {
			add(fmt.Sprintf("softmax/%v/dim=%d", shape, dim), ins(shape, shape), func(in []*tensor.Tensor) []*tensor.Tensor {
				y, ly := tensor.Softmax(in[0], dim), tensor.LogSoftmax(in[0], dim)
				return outs(y, ly, tensor.SoftmaxBackward(y, in[1], dim), tensor.LogSoftmaxBackward(ly, in[1], dim))
			})
		}
	}

	// Cross-entropy, forward and backward.
	for _, c := range []struct {
		name string
		n, c int
		o    tensor.CrossEntropyOptions
	}{
		{"mean", 5, 7, tensor.CrossEntropyOptions{}},
		{"sum-smooth", 4, 3, tensor.CrossEntropyOptions{Reduction: tensor.ReduceSum, LabelSmoothing: 0.1}},
		{"none-ignore", 6, 5, tensor.CrossEntropyOptions{Reduction: tensor.ReduceNone, Ignore: true, IgnoreIndex: -100}},
		{"mean-ignore", 64, 256, tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: 3}},
		{"one-class", 3, 1, tensor.CrossEntropyOptions{}},
	} {
		c := c
		var target []int64
		add("cross-entropy/"+c.name, func(r *rand.Rand) []*tensor.Tensor {
			target = make([]int64, c.n)
			for i := range target {
				target[i] = int64(r.IntN(c.c))
				if c.o.Ignore && i%3 == 1 {
					target[i] = c.o.IgnoreIndex
				}
			}
			g := []int{}
			if c.o.Reduction == tensor.ReduceNone {
				g = []int{c.n}
			}
			return outs(randn(r, c.n, c.c), randn(r, g...))
		}, func(in []*tensor.Tensor) []*tensor.Tensor {
			loss, prob := tensor.CrossEntropy(in[0], target, c.o)
			p := prob.Clone()
			return outs(loss, p, tensor.CrossEntropyBackward(prob, in[1], target, c.o))
		})
	}

	// LayerNorm with and without the affine parameters.
	for _, shape := range [][]int{{1, 1}, {4, 7}, {2, 3, 64}, {0, 5}} {
		D := shape[len(shape)-1]
		for _, affine := range []bool{true, false} {
			sh := [][]int{shape, shape, nil, nil}
			if affine {
				sh[2], sh[3] = []int{D}, []int{D}
			}
			add(fmt.Sprintf("layernorm/%v/affine=%v", shape, affine), ins(sh...), func(in []*tensor.Tensor) []*tensor.Tensor {
				y, mean, rstd := tensor.LayerNormStats(in[0], in[2], in[3], 1e-5)
				dx, dw, db := tensor.LayerNormStatsBackward(in[1], in[0], in[2], mean, rstd)
				return outs(y, mean, rstd, dx, dw, db)
			})
		}
	}

	// Causal and full attention over a fused qkv: the output and the
	// gradient (what the forward pass saves for the backward one is each
	// backend's own, and is not compared).
	for _, c := range [][4]int{{1, 1, 1, 1}, {2, 5, 2, 3}, {1, 17, 4, 8}, {0, 3, 2, 2}} {
		B, T, H, hd := c[0], c[1], c[2], c[3]
		for _, causal := range []bool{true, false} {
			add(fmt.Sprintf("attention/B=%d/T=%d/heads=%d/hd=%d/causal=%v", B, T, H, hd, causal), ins([]int{B, T, 3 * H * hd}, []int{B, T, H * hd}), func(in []*tensor.Tensor) []*tensor.Tensor {
				y, p := tensor.AttentionQKV(in[0], H, causal)
				return outs(y, tensor.AttentionQKVBackward(in[1], in[0], p, H, causal))
			})
		}
	}

	// Convolutions (plain and fused with ReLU), forward and backward.
	for _, c := range []struct{ n, cin, h, w, o, k, stride, pad int }{
		{1, 1, 5, 5, 1, 3, 1, 0}, {2, 3, 8, 7, 4, 3, 1, 1}, {2, 1, 28, 28, 6, 5, 1, 2}, {3, 2, 9, 9, 5, 3, 2, 1}, {0, 2, 5, 5, 3, 3, 1, 0},
	} {
		c := c
		oh, ow := (c.h+2*c.pad-c.k)/c.stride+1, (c.w+2*c.pad-c.k)/c.stride+1
		for _, relu := range []bool{false, true} {
			add(fmt.Sprintf("conv2d/%+v/relu=%v", c, relu), ins([]int{c.n, c.cin, c.h, c.w}, []int{c.o, c.cin, c.k, c.k}, []int{c.o}, []int{c.n, c.o, oh, ow}), func(in []*tensor.Tensor) []*tensor.Tensor {
				if relu {
					y := tensor.Conv2dReLU(in[0], in[1], in[2], c.stride, c.pad)
					dx, dw, db := tensor.Conv2dReLUBackward(in[3], y, in[0], in[1], c.stride, c.pad, true)
					_, dw2, _ := tensor.Conv2dReLUBackward(in[3], y, in[0], in[1], c.stride, c.pad, false)
					return outs(y, dx, dw, db, dw2)
				}
				y := tensor.Conv2d(in[0], in[1], in[2], c.stride, c.pad)
				dx, dw, db := tensor.Conv2dBackward(in[3], in[0], in[1], c.stride, c.pad, true)
				return outs(y, dx, dw, db, tensor.Conv2d(in[0], in[1], nil, c.stride, c.pad))
			})
		}
	}

	// Max pooling (the backward pass finds the maxima again from x).
	for _, c := range [][7]int{{1, 1, 4, 4, 2, 2, 0}, {2, 6, 28, 28, 2, 2, 0}, {2, 3, 7, 5, 3, 2, 1}, {1, 2, 5, 6, 3, 1, 1}, {0, 2, 4, 4, 2, 2, 0}} {
		N, C, H, W, k, stride, pad := c[0], c[1], c[2], c[3], c[4], c[5], c[6]
		oh, ow := (H+2*pad-k)/stride+1, (W+2*pad-k)/stride+1
		add(fmt.Sprintf("maxpool2d/%v", c), ins([]int{N, C, H, W}, []int{N, C, oh, ow}), func(in []*tensor.Tensor) []*tensor.Tensor {
			y, _ := tensor.MaxPool2d(in[0], k, stride, pad)
			return outs(y, tensor.MaxPool2dBackwardFromInput(in[1], in[0], k, stride, pad))
		})
	}

	// Average pooling.
	for _, c := range [][7]int{{1, 1, 4, 4, 2, 2, 0}, {2, 3, 7, 5, 3, 2, 1}, {0, 2, 4, 4, 2, 2, 0}} {
		N, C, H, W, k, stride, pad := c[0], c[1], c[2], c[3], c[4], c[5], c[6]
		oh, ow := (H+2*pad-k)/stride+1, (W+2*pad-k)/stride+1
		add(fmt.Sprintf("avgpool2d/%v", c), ins([]int{N, C, H, W}, []int{N, C, oh, ow}), func(in []*tensor.Tensor) []*tensor.Tensor {
			return outs(tensor.AvgPool2d(in[0], k, stride, pad), tensor.AvgPool2dBackward(in[1], in[0].Shape(), k, stride, pad))
		})
	}

	// Embedding rows, gathered and scattered back (repeated indices add).
	for _, c := range []struct {
		v, d int
		idx  []int64
	}{{1, 1, []int64{0}}, {10, 7, []int64{3, 0, 9, 3, 3}}, {5, 4, nil}, {50, 33, []int64{49, 1, 2, 1, 0, 48, 1}}} {
		c := c
		add(fmt.Sprintf("index-rows/V=%d/D=%d/n=%d", c.v, c.d, len(c.idx)), ins([]int{c.v, c.d}, []int{len(c.idx), c.d}), func(in []*tensor.Tensor) []*tensor.Tensor {
			rows := tensor.IndexRows(in[0], c.idx)
			tensor.IndexAddRows(in[0], c.idx, in[1])
			return outs(rows, in[0])
		})
	}
	return cs
}
