package nn

import (
	"fmt"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/tensor"
)

// LayerNorm normalises over the last dimension (size D) with Weight and
// Bias [D], initialised to 1 and 0. Parameters: "weight", "bias".
type LayerNorm struct {
	Weight, Bias *autograd.Var
	Eps          float64
}

// NewLayerNorm returns a LayerNorm over d features with eps 1e-5.
func NewLayerNorm(d int) *LayerNorm {
	checkPositive("NewLayerNorm", d)
	return &LayerNorm{Weight: autograd.NewVar(tensor.Full(1, d), true), Bias: param(d), Eps: 1e-5}
}

func (l *LayerNorm) Forward(x *autograd.Var) *autograd.Var {
	return autograd.LayerNorm(x, l.Weight, l.Bias, l.Eps)
}

func (l *LayerNorm) NamedParameters() []NamedParameter {
	return []NamedParameter{{"weight", l.Weight}, {"bias", l.Bias}}
}
func (l *LayerNorm) NamedBuffers() []NamedBuffer { return nil }
func (l *LayerNorm) SetTraining(bool)            {}

// BatchNorm2d normalises [N, C, H, W] per channel: with the batch
// statistics while training (updating the running statistics with
// Momentum), with the running statistics in evaluation mode. Parameters:
// "weight", "bias" (1 and 0); buffers: "running_mean", "running_var" (0
// and 1). PyTorch's integer num_batches_tracked buffer is not kept.
type BatchNorm2d struct {
	Weight, Bias            *autograd.Var
	RunningMean, RunningVar *tensor.Tensor
	Momentum, Eps           float64
	training                bool
}

// NewBatchNorm2d returns a BatchNorm2d over c channels in training mode
// with momentum 0.1 and eps 1e-5.
func NewBatchNorm2d(c int) *BatchNorm2d {
	checkPositive("NewBatchNorm2d", c)
	return &BatchNorm2d{
		Weight: autograd.NewVar(tensor.Full(1, c), true), Bias: param(c),
		RunningMean: tensor.New(c), RunningVar: tensor.Full(1, c),
		Momentum: 0.1, Eps: 1e-5, training: true,
	}
}

func (b *BatchNorm2d) Forward(x *autograd.Var) *autograd.Var {
	if x.Value.Dims() != 4 {
		panic(fmt.Sprintf("nn: BatchNorm2d: input shape %v, want [N, C, H, W]", x.Value.Shape()))
	}
	return autograd.BatchNorm(x, b.Weight, b.Bias, b.RunningMean, b.RunningVar,
		autograd.BatchNormOptions{Training: b.training, Momentum: b.Momentum, Eps: b.Eps})
}

func (b *BatchNorm2d) NamedParameters() []NamedParameter {
	return []NamedParameter{{"weight", b.Weight}, {"bias", b.Bias}}
}
func (b *BatchNorm2d) NamedBuffers() []NamedBuffer {
	return []NamedBuffer{{"running_mean", b.RunningMean}, {"running_var", b.RunningVar}}
}
func (b *BatchNorm2d) SetTraining(on bool) { b.training = on }
