package nn

import (
	"strconv"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/tensor"
)

// Child is a named submodule, used to build a composite module's
// parameter and buffer lists.
type Child struct {
	Name   string
	Module Module
}

// ChildParameters lists the children's parameters in order, each name
// prefixed with its child's name and a dot ("0.weight", "attn.qkv.bias").
func ChildParameters(children ...Child) []NamedParameter {
	return childEntries(children, Module.NamedParameters)
}

// ChildBuffers lists the children's buffers like ChildParameters.
func ChildBuffers(children ...Child) []NamedBuffer {
	return childEntries(children, Module.NamedBuffers)
}

// childEntries lists what list gives for each child in order, each name
// prefixed with its child's name and a dot.
func childEntries[T interface{ withPrefix(string) T }](children []Child, list func(Module) []T) []T {
	var out []T
	for _, c := range children {
		for _, e := range list(c.Module) {
			out = append(out, e.withPrefix(c.Name+"."))
		}
	}
	return out
}

func (p NamedParameter) withPrefix(s string) NamedParameter { p.Name = s + p.Name; return p }

func (b NamedBuffer) withPrefix(s string) NamedBuffer { b.Name = s + b.Name; return b }

// Sequential applies its layers in order; layer i's parameters are named
// "i.<name>", as in PyTorch's nn.Sequential.
//
// Forward fuses common runs of layers into single autograd ops that skip
// writing and re-reading the intermediate tensors: a *Conv2d followed by
// ReLU, then optionally by a *MaxPool2d whose stride equals its kernel and
// whose padding is 0 (autograd.Conv2dReLUMaxPool2d, autograd.Conv2dReLU),
// and a *Linear followed by ReLU (autograd.LinearReLU). The fused ops
// compute the same values and gradients as the layers one by one; only
// the intermediate outputs, which Sequential never returns, are not
// materialised.
type Sequential struct {
	Layers []Layer
}

// NewSequential returns the composition of layers.
func NewSequential(layers ...Layer) *Sequential { return &Sequential{Layers: layers} }

func (s *Sequential) children() []Child {
	cs := make([]Child, len(s.Layers))
	for i, l := range s.Layers {
		cs[i] = Child{strconv.Itoa(i), l}
	}
	return cs
}

// Forward runs x through every layer, fusing runs of layers as the type
// documentation describes.
//
// An output that only the next layer reads, where both are Linear layers
// (fused with a ReLU or not), is marked autograd.Transient: its storage is
// reused once Backward has passed it, so a steady-state training step
// allocates no new activation memory.
func (s *Sequential) Forward(x *autograd.Var) *autograd.Var {
	prevLinear := false // x is the output of a Linear (fused or not) inside s
	for i := 0; i < len(s.Layers); {
		y, n := forwardFused(s.Layers[i:], x)
		if n == 0 {
			y, n = s.Layers[i].Forward(x), 1
		}
		_, isLinear := s.Layers[i].(*Linear)
		if prevLinear && isLinear {
			// x was computed into storage of its own and is read only
			// by this Linear, which computes y into fresh storage.
			autograd.Transient(x)
		}
		prevLinear = isLinear
		x = y
		i += n
	}
	return x
}

// forwardFused applies the fusable run of layers at the start of ls to x,
// returning the result and how many layers it covered (0: none fused).
func forwardFused(ls []Layer, x *autograd.Var) (*autograd.Var, int) {
	if len(ls) < 2 || !isReLU(ls[1]) {
		return nil, 0
	}
	switch l := ls[0].(type) {
	case *Conv2d:
		if len(ls) >= 3 {
			if p, ok := ls[2].(*MaxPool2d); ok && p.Stride == p.Kernel && p.Padding == 0 {
				return autograd.Conv2dReLUMaxPool2d(x, l.Weight, l.Bias, l.Stride, l.Padding, p.Kernel), 3
			}
		}
		return autograd.Conv2dReLU(x, l.Weight, l.Bias, l.Stride, l.Padding), 2
	case *Linear:
		return autograd.LinearReLU(x, l.Weight, l.Bias), 2
	}
	return nil, 0
}

func isReLU(l Layer) bool {
	switch l.(type) {
	case ReLU, *ReLU:
		return true
	}
	return false
}

func (s *Sequential) NamedParameters() []NamedParameter { return ChildParameters(s.children()...) }
func (s *Sequential) NamedBuffers() []NamedBuffer       { return ChildBuffers(s.children()...) }
func (s *Sequential) SetTraining(on bool) {
	for _, l := range s.Layers {
		l.SetTraining(on)
	}
}

// Parameters returns m's parameters in their stable order.
func Parameters(m Module) []*autograd.Var {
	named := m.NamedParameters()
	ps := make([]*autograd.Var, len(named))
	for i, p := range named {
		ps[i] = p.Param
	}
	return ps
}

// NumParameters returns the total number of parameter elements of m.
func NumParameters(m Module) int {
	n := 0
	for _, p := range m.NamedParameters() {
		n += p.Param.Value.Len()
	}
	return n
}

// ZeroGrad zeroes every parameter gradient of m in place.
func ZeroGrad(m Module) {
	for _, p := range m.NamedParameters() {
		p.Param.ZeroGrad()
	}
}

// NoGrad switches gradient tracking off for m's parameters (so a forward
// pass records no graph) and returns the function that switches it back:
//
//	defer nn.NoGrad(model)()
func NoGrad(m Module) (restore func()) { return autograd.NoGrad(Parameters(m)...) }

// Autocast runs the matrix products of m (its linear layers,
// convolutions and attention, forward and backward) in dt with float32
// accumulation, everything else in float32, until restore is called:
// autograd.Autocast on all of m's parameters (see there), as NoGrad is
// autograd.NoGrad on them.
//
//	defer nn.Autocast(model, tensor.BFloat16)()
func Autocast(m Module, dt tensor.DType) (restore func()) {
	return autograd.Autocast(dt, Parameters(m)...)
}
