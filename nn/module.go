package nn

import (
	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/tensor"
)

// NamedParameter is a parameter with its dotted path ("0.weight").
type NamedParameter struct {
	Name  string
	Param *autograd.Var
}

// NamedBuffer is a non-trainable state tensor (BatchNorm running stats).
type NamedBuffer struct {
	Name   string
	Buffer *tensor.Tensor
}

// Module is anything with parameters and buffers. The order of
// NamedParameters and NamedBuffers is stable (registration order, children
// depth-first), the same on every rank; DDP and optimizers rely on it.
type Module interface {
	NamedParameters() []NamedParameter
	NamedBuffers() []NamedBuffer
	// SetTraining switches train/eval behaviour (Dropout, BatchNorm) for
	// the module and its children.
	SetTraining(training bool)
}

// Layer is a Module with a single-input forward pass.
type Layer interface {
	Module
	Forward(x *autograd.Var) *autograd.Var
}
