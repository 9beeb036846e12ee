package nn

import (
	"strconv"

	"cohort/autograd"
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
	var out []NamedParameter
	for _, c := range children {
		for _, p := range c.Module.NamedParameters() {
			out = append(out, NamedParameter{c.Name + "." + p.Name, p.Param})
		}
	}
	return out
}

// ChildBuffers lists the children's buffers like ChildParameters.
func ChildBuffers(children ...Child) []NamedBuffer {
	var out []NamedBuffer
	for _, c := range children {
		for _, b := range c.Module.NamedBuffers() {
			out = append(out, NamedBuffer{c.Name + "." + b.Name, b.Buffer})
		}
	}
	return out
}

// Sequential applies its layers in order; layer i's parameters are named
// "i.<name>", as in PyTorch's nn.Sequential.
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

// Forward runs x through every layer.
func (s *Sequential) Forward(x *autograd.Var) *autograd.Var {
	for _, l := range s.Layers {
		x = l.Forward(x)
	}
	return x
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
