package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/tensor"
)

// KaimingUniform fills t from U(−b, b) with b = gain·√(3/fanIn) and
// gain = √(2/(1+a²)): PyTorch's kaiming_uniform_ for a leaky-ReLU slope a.
// Linear and Conv2d weights use a = √5, which makes b = 1/√fanIn.
func KaimingUniform(t *tensor.Tensor, rng *rand.Rand, a float64, fanIn int) {
	gain := math.Sqrt(2 / (1 + a*a))
	b := float32(gain * math.Sqrt(3/float64(fanIn)))
	t.FillUniform(rng, -b, b)
}

// param returns a new trainable leaf of the given shape.
func param(shape ...int) *autograd.Var { return autograd.NewVar(tensor.New(shape...), true) }

// initLinearLike applies PyTorch's default Linear/Conv initialisation:
// weight kaiming_uniform(a=√5), bias U(±1/√fanIn), drawn in that order.
func initLinearLike(rng *rand.Rand, w, b *autograd.Var, fanIn int) {
	KaimingUniform(w.Value, rng, math.Sqrt(5), fanIn)
	if b != nil {
		bound := float32(0)
		if fanIn > 0 {
			bound = float32(1 / math.Sqrt(float64(fanIn)))
		}
		b.Value.FillUniform(rng, -bound, bound)
	}
}

func checkPositive(op string, vals ...int) {
	for _, v := range vals {
		if v <= 0 {
			panic(fmt.Sprintf("nn: %s: sizes %v must be positive", op, vals))
		}
	}
}

// Linear is y = x·Wᵀ + b with Weight [out, in] and Bias [out] (nil when
// built without bias). Parameters: "weight", "bias".
type Linear struct {
	Weight, Bias *autograd.Var
}

// NewLinear returns a Linear layer from in to out features with PyTorch's
// default initialisation drawn from rng.
func NewLinear(rng *rand.Rand, in, out int, bias bool) *Linear {
	checkPositive("NewLinear", in, out)
	l := &Linear{Weight: param(out, in)}
	if bias {
		l.Bias = param(out)
	}
	initLinearLike(rng, l.Weight, l.Bias, in)
	return l
}

// Forward applies the layer to x [..., in].
func (l *Linear) Forward(x *autograd.Var) *autograd.Var { return autograd.Linear(x, l.Weight, l.Bias) }

func (l *Linear) NamedParameters() []NamedParameter { return weightBias(l.Weight, l.Bias) }
func (l *Linear) NamedBuffers() []NamedBuffer       { return nil }
func (l *Linear) SetTraining(bool)                  {}

// Conv2dOptions configures NewConv2d. The zero value is stride 1, no
// padding, with bias.
type Conv2dOptions struct {
	Stride  int // 0 means 1
	Padding int
	NoBias  bool
}

// Conv2d is a 2-D convolution with Weight [out, in, k, k] and Bias [out].
// Parameters: "weight", "bias".
type Conv2d struct {
	Weight, Bias    *autograd.Var
	Stride, Padding int
}

// NewConv2d returns a k×k convolution from in to out channels with
// PyTorch's default initialisation drawn from rng.
func NewConv2d(rng *rand.Rand, in, out, k int, o Conv2dOptions) *Conv2d {
	checkPositive("NewConv2d", in, out, k)
	if o.Stride < 0 || o.Padding < 0 {
		panic(fmt.Sprintf("nn: NewConv2d: stride %d, padding %d", o.Stride, o.Padding))
	}
	c := &Conv2d{Weight: param(out, in, k, k), Stride: max(o.Stride, 1), Padding: o.Padding}
	if !o.NoBias {
		c.Bias = param(out)
	}
	initLinearLike(rng, c.Weight, c.Bias, in*k*k)
	return c
}

// Forward applies the convolution to x [N, in, H, W].
func (c *Conv2d) Forward(x *autograd.Var) *autograd.Var {
	return autograd.Conv2d(x, c.Weight, c.Bias, c.Stride, c.Padding)
}

func (c *Conv2d) NamedParameters() []NamedParameter { return weightBias(c.Weight, c.Bias) }
func (c *Conv2d) NamedBuffers() []NamedBuffer       { return nil }
func (c *Conv2d) SetTraining(bool)                  {}

// Embedding is a lookup table Weight [num, dim], initialised N(0, 1) as in
// PyTorch. Parameter: "weight". It is a Module but not a Layer: its input
// is indices, see Lookup.
type Embedding struct {
	Weight *autograd.Var
}

// NewEmbedding returns a table of num vectors of size dim drawn from rng.
func NewEmbedding(rng *rand.Rand, num, dim int) *Embedding {
	checkPositive("NewEmbedding", num, dim)
	e := &Embedding{Weight: param(num, dim)}
	e.Weight.Value.FillNormal(rng, 0, 1)
	return e
}

// Lookup returns the rows idx, shaped shape + [dim] (shape defaults to
// [len(idx)]).
func (e *Embedding) Lookup(idx []int64, shape ...int) *autograd.Var {
	return autograd.Embedding(e.Weight, idx, shape...)
}

func (e *Embedding) NamedParameters() []NamedParameter { return []NamedParameter{{"weight", e.Weight}} }
func (e *Embedding) NamedBuffers() []NamedBuffer       { return nil }
func (e *Embedding) SetTraining(bool)                  {}

// weightBias names a layer's weight and, when it has one, its bias.
func weightBias(w, b *autograd.Var) []NamedParameter {
	ps := []NamedParameter{{"weight", w}}
	if b != nil {
		ps = append(ps, NamedParameter{"bias", b})
	}
	return ps
}

// stateless provides the Module methods of layers without parameters.
type stateless struct{}

func (stateless) NamedParameters() []NamedParameter { return nil }
func (stateless) NamedBuffers() []NamedBuffer       { return nil }
func (stateless) SetTraining(bool)                  {}

// ReLU is max(x, 0).
type ReLU struct{ stateless }

func (ReLU) Forward(x *autograd.Var) *autograd.Var { return autograd.ReLU(x) }

// GELU is x·Φ(x); with Tanh set, PyTorch's approximate="tanh" form.
type GELU struct {
	stateless
	Tanh bool
}

func (g GELU) Forward(x *autograd.Var) *autograd.Var {
	if g.Tanh {
		return autograd.GELUTanh(x)
	}
	return autograd.GELU(x)
}

// SiLU is x·sigmoid(x).
type SiLU struct{ stateless }

func (SiLU) Forward(x *autograd.Var) *autograd.Var { return autograd.SiLU(x) }

// Tanh is tanh(x).
type Tanh struct{ stateless }

func (Tanh) Forward(x *autograd.Var) *autograd.Var { return autograd.Tanh(x) }

// Sigmoid is 1/(1+e⁻ˣ).
type Sigmoid struct{ stateless }

func (Sigmoid) Forward(x *autograd.Var) *autograd.Var { return autograd.Sigmoid(x) }

// Flatten reshapes [N, ...] to [N, rest].
type Flatten struct{ stateless }

func (Flatten) Forward(x *autograd.Var) *autograd.Var { return autograd.Flatten(x) }

// Pool2d is a pooling layer's window: Kernel×Kernel, Stride apart, over
// the input padded by Padding on each side. MaxPool2d and AvgPool2d are
// Pool2d with their Forward.
type Pool2d struct {
	stateless
	Kernel, Stride, Padding int
}

// MaxPool2d takes the maximum of Kernel×Kernel windows.
type MaxPool2d Pool2d

// NewMaxPool2d returns k×k max pooling with stride k (PyTorch's default).
func NewMaxPool2d(k int) *MaxPool2d { return &MaxPool2d{Kernel: k, Stride: k} }

func (p *MaxPool2d) Forward(x *autograd.Var) *autograd.Var {
	return autograd.MaxPool2d(x, p.Kernel, p.Stride, p.Padding)
}

// AvgPool2d takes the mean of Kernel×Kernel windows.
type AvgPool2d Pool2d

// NewAvgPool2d returns k×k average pooling with stride k.
func NewAvgPool2d(k int) *AvgPool2d { return &AvgPool2d{Kernel: k, Stride: k} }

func (p *AvgPool2d) Forward(x *autograd.Var) *autograd.Var {
	return autograd.AvgPool2d(x, p.Kernel, p.Stride, p.Padding)
}

// Dropout zeroes elements with probability P while training, drawing from
// its own generator, and is the identity in evaluation mode.
type Dropout struct {
	P        float64
	rng      *rand.Rand
	training bool
}

// NewDropout returns a Dropout layer in training mode.
func NewDropout(p float64, rng *rand.Rand) *Dropout {
	if p < 0 || p >= 1 {
		panic(fmt.Sprintf("nn: NewDropout: probability %g outside [0, 1)", p))
	}
	return &Dropout{P: p, rng: rng, training: true}
}

func (d *Dropout) Forward(x *autograd.Var) *autograd.Var {
	if !d.training {
		return x
	}
	return autograd.Dropout(x, d.P, d.rng)
}
func (d *Dropout) NamedParameters() []NamedParameter { return nil }
func (d *Dropout) NamedBuffers() []NamedBuffer       { return nil }
func (d *Dropout) SetTraining(on bool)               { d.training = on }
