package nn

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/tensor"
)

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 3)) }

func names(m Module) []string {
	var out []string
	for _, p := range m.NamedParameters() {
		out = append(out, p.Name)
	}
	for _, b := range m.NamedBuffers() {
		out = append(out, "buffer:"+b.Name)
	}
	return out
}

func TestParameterNames(t *testing.T) {
	rng := newRNG(1)
	tests := []struct {
		name string
		m    Module
		want []string
	}{
		{"sequential", NewSequential(NewLinear(rng, 4, 3, true), ReLU{}, NewLinear(rng, 3, 2, false)),
			[]string{"0.weight", "0.bias", "2.weight"}},
		{"conv_bn", NewSequential(NewConv2d(rng, 1, 2, 3, Conv2dOptions{}), NewBatchNorm2d(2), NewMaxPool2d(2)),
			[]string{"0.weight", "0.bias", "1.weight", "1.bias", "buffer:1.running_mean", "buffer:1.running_var"}},
		{"block", NewBlock(rng, 8, 2), []string{
			"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
			"ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"}},
		{"embedding", NewEmbedding(rng, 5, 3), []string{"weight"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(tc.m); !slices.Equal(got, tc.want) {
				t.Errorf("names %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDefaultInit(t *testing.T) {
	l := NewLinear(newRNG(2), 400, 300, true)
	bound := 1 / math.Sqrt(400)
	var sum2 float64
	for _, v := range l.Weight.Value.Data() {
		if math.Abs(float64(v)) > bound {
			t.Fatalf("weight %g outside ±%g", v, bound)
		}
		sum2 += float64(v) * float64(v)
	}
	// U(−b, b) has variance b²/3.
	if v := sum2 / float64(l.Weight.Value.Len()); math.Abs(v-bound*bound/3) > 0.05*bound*bound/3 {
		t.Errorf("weight variance %g, want %g", v, bound*bound/3)
	}
	for _, v := range l.Bias.Value.Data() {
		if math.Abs(float64(v)) > bound {
			t.Fatalf("bias %g outside ±%g", v, bound)
		}
	}
	c := NewConv2d(newRNG(2), 6, 16, 5, Conv2dOptions{})
	cb := 1 / math.Sqrt(6*25)
	for _, v := range c.Weight.Value.Data() {
		if math.Abs(float64(v)) > cb {
			t.Fatalf("conv weight %g outside ±%g", v, cb)
		}
	}
	a, b := NewLinear(newRNG(3), 5, 4, true), NewLinear(newRNG(3), 5, 4, true)
	if !slices.Equal(a.Weight.Value.Data(), b.Weight.Value.Data()) || !slices.Equal(a.Bias.Value.Data(), b.Bias.Value.Data()) {
		t.Errorf("same seed, different initialisation")
	}
}

func TestStateDict(t *testing.T) {
	src := NewSequential(NewLinear(newRNG(4), 3, 2, true), NewBatchNorm2d(2))
	dst := NewSequential(NewLinear(newRNG(5), 3, 2, true), NewBatchNorm2d(2))
	src.Layers[1].(*BatchNorm2d).RunningMean.Fill(0.5)
	view := dst.Layers[0].(*Linear).Weight.Value // must stay the module's tensor
	if err := LoadStateDict(dst, StateDict(src)); err != nil {
		t.Fatal(err)
	}
	for name, want := range StateDict(src) {
		if got := StateDict(dst)[name]; !slices.Equal(got.Data(), want.Data()) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if dst.Layers[0].(*Linear).Weight.Value != view {
		t.Errorf("LoadStateDict replaced a tensor instead of copying into it")
	}

	bad := map[string]*tensor.Tensor{}
	for k, v := range StateDict(src) {
		bad[k] = v.Clone()
	}
	delete(bad, "0.bias")
	bad["0.weight"] = tensor.New(3, 2)
	bad["extra"] = tensor.New(1)
	before := dst.Layers[1].(*BatchNorm2d).RunningVar.Clone()
	bad["1.running_var"] = tensor.Full(7, 2)
	err := LoadStateDict(dst, bad)
	if !errors.Is(err, ErrStateDict) {
		t.Fatalf("error %v does not wrap ErrStateDict", err)
	}
	for _, frag := range []string{`missing key "0.bias"`, `unexpected key "extra"`, `key "0.weight": shape [3 2], module has [2 3]`} {
		if !strings.Contains(err.Error(), frag) {
			t.Errorf("error %q does not mention %q", err, frag)
		}
	}
	if !slices.Equal(dst.Layers[1].(*BatchNorm2d).RunningVar.Data(), before.Data()) {
		t.Errorf("a failed load changed the module")
	}
}

func TestTrainingModes(t *testing.T) {
	rng := newRNG(6)
	bn := NewBatchNorm2d(2)
	drop := NewDropout(0.5, newRNG(7))
	m := NewSequential(bn, drop)
	x := autograd.NewVar(tensor.New(4, 2, 3, 3), false)
	x.Value.FillNormal(rng, 3, 2)
	m.Forward(x)
	if bn.RunningMean.Data()[0] == 0 {
		t.Fatalf("training forward did not update running mean")
	}
	m.SetTraining(false)
	rm := bn.RunningMean.Clone()
	y1, y2 := m.Forward(x).Value, m.Forward(x).Value
	if !slices.Equal(y1.Data(), y2.Data()) {
		t.Errorf("evaluation mode is not deterministic (dropout still active?)")
	}
	if !slices.Equal(rm.Data(), bn.RunningMean.Data()) {
		t.Errorf("evaluation forward changed running statistics")
	}
	// Eval output uses the running statistics: y = (x − rm)/√(rv+eps).
	want := (x.Value.At(0, 1, 0, 0) - bn.RunningMean.At(1)) / float32(math.Sqrt(float64(bn.RunningVar.At(1))+1e-5))
	if got := y1.At(0, 1, 0, 0); math.Abs(float64(got-want)) > 1e-5 {
		t.Errorf("eval batch norm = %g, want %g", got, want)
	}
}

func TestNoGradModule(t *testing.T) {
	l := NewLinear(newRNG(8), 3, 2, true)
	x := autograd.NewVar(tensor.Full(1, 4, 3), false)
	restore := NoGrad(l)
	if y := l.Forward(x); y.RequiresGrad() || !y.IsLeaf() {
		t.Errorf("forward under NoGrad recorded a graph")
	}
	restore()
	if y := l.Forward(x); !y.RequiresGrad() {
		t.Errorf("tracking not restored")
	}
}

func TestCausalAttentionIgnoresFuture(t *testing.T) {
	rng := newRNG(9)
	a := NewCausalSelfAttention(rng, 8, 2)
	x := tensor.New(2, 5, 8)
	x.FillNormal(rng, 0, 1)
	y1 := a.Forward(autograd.NewVar(x, false)).Value.Clone()
	x.Narrow(1, 3, 2).FillNormal(rng, 0, 1) // change positions 3 and 4
	y2 := a.Forward(autograd.NewVar(x, false)).Value
	if !slices.Equal(y1.Narrow(1, 0, 3).Contiguous().Data(), y2.Narrow(1, 0, 3).Contiguous().Data()) {
		t.Errorf("outputs at positions 0..2 changed when only later positions did")
	}
	if slices.Equal(y1.Narrow(1, 3, 2).Contiguous().Data(), y2.Narrow(1, 3, 2).Contiguous().Data()) {
		t.Errorf("outputs at positions 3..4 did not change")
	}
}

func TestLayerPanics(t *testing.T) {
	rng := newRNG(10)
	for _, tc := range []struct {
		name string
		f    func()
		want string
	}{
		{"linear_size", func() { NewLinear(rng, 0, 3, true) }, "nn: NewLinear"},
		{"heads", func() { NewCausalSelfAttention(rng, 10, 3) }, "3 heads do not divide 10"},
		{"dropout_p", func() { NewDropout(1, rng) }, "nn: NewDropout"},
		{"bn_rank", func() { NewBatchNorm2d(2).Forward(autograd.NewVar(tensor.New(2, 2), false)) }, "nn: BatchNorm2d: input shape [2 2]"},
		{"linear_shape", func() { NewLinear(rng, 3, 2, true).Forward(autograd.NewVar(tensor.New(4, 5), false)) }, "Linear: input shape [4 5]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(r.(string), tc.want) {
					t.Errorf("panic %v, want one mentioning %q", r, tc.want)
				}
			}()
			tc.f()
		})
	}
}

// TestSequentialFusion runs models whose layer runs Forward fuses
// (Conv2d-ReLU-MaxPool2d, Conv2d-ReLU, Linear-ReLU) and checks the output
// and every parameter gradient against applying the layers one by one.
func TestSequentialFusion(t *testing.T) {
	build := map[string]func(rng *rand.Rand) (*Sequential, []int){
		"lenet": func(rng *rand.Rand) (*Sequential, []int) {
			return NewSequential(
				NewConv2d(rng, 1, 3, 5, Conv2dOptions{Padding: 2}), ReLU{}, NewMaxPool2d(2),
				NewConv2d(rng, 3, 4, 3, Conv2dOptions{}), &ReLU{}, NewMaxPool2d(2),
				Flatten{}, NewLinear(rng, 16, 8, true), ReLU{}, NewLinear(rng, 8, 3, true),
			), []int{5, 1, 12, 12}
		},
		"conv_relu_overlapping_pool": func(rng *rand.Rand) (*Sequential, []int) {
			p := &MaxPool2d{Kernel: 3, Stride: 2}
			return NewSequential(NewConv2d(rng, 2, 3, 3, Conv2dOptions{Stride: 2, Padding: 1}), ReLU{}, p,
				NewConv2d(rng, 3, 2, 1, Conv2dOptions{NoBias: true}), ReLU{}), []int{3, 2, 13, 11}
		},
		"relu_first_and_last": func(rng *rand.Rand) (*Sequential, []int) {
			return NewSequential(ReLU{}, NewLinear(rng, 6, 4, false), ReLU{}), []int{7, 6}
		},
	}
	for name, f := range build {
		t.Run(name, func(t *testing.T) {
			rng := newRNG(9)
			m, shape := f(rng)
			x := tensor.New(shape...)
			x.FillNormal(rng, 0, 1)
			fused := m.Forward(autograd.NewVar(x, false))
			dout := tensor.New(fused.Value.Shape()...)
			dout.FillNormal(rng, 0, 1)
			autograd.BackwardGrad(fused, dout)
			var want []*tensor.Tensor
			for _, p := range Parameters(m) {
				want = append(want, p.Grad.Clone())
			}
			ZeroGrad(m)
			plain := autograd.NewVar(x, false)
			for _, l := range m.Layers {
				plain = l.Forward(plain)
			}
			if !slices.Equal(fused.Value.Data(), plain.Value.Data()) {
				t.Fatalf("fused output %v, layer by layer %v", fused.Value, plain.Value)
			}
			autograd.BackwardGrad(plain, dout)
			for i, p := range Parameters(m) {
				g, w := want[i].Data(), p.Grad.Data()
				for j := range g {
					if d := math.Abs(float64(g[j] - w[j])); d > 1e-6*(1+math.Abs(float64(w[j]))) {
						t.Fatalf("parameter %d gradient [%d]: fused %g, layer by layer %g", i, j, g[j], w[j])
					}
				}
			}
		})
	}
	// The fused ops really run: the LeNet block's output comes from one op.
	m := NewSequential(NewConv2d(newRNG(1), 1, 2, 3, Conv2dOptions{}), ReLU{}, NewMaxPool2d(2))
	if op := m.Forward(autograd.NewVar(tensor.New(1, 1, 6, 6), false)).Op(); op != "Conv2dReLUMaxPool2d" {
		t.Errorf("conv-relu-pool block ran as %q, want one Conv2dReLUMaxPool2d", op)
	}
	l := NewSequential(NewLinear(newRNG(1), 3, 2, true), ReLU{})
	if op := l.Forward(autograd.NewVar(tensor.New(4, 3), false)).Op(); op != "LinearReLU" {
		t.Errorf("linear-relu ran as %q, want LinearReLU", op)
	}
}
