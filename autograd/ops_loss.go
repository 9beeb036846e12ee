package autograd

import (
	"fmt"

	"github.com/cohortml/cohort/tensor"
)

// Reduction says how a loss combines per-sample values (tensor owns it).
type Reduction = tensor.Reduction

const (
	ReduceMean = tensor.ReduceMean // average over the samples that count (the default)
	ReduceSum  = tensor.ReduceSum  // add them up
	ReduceNone = tensor.ReduceNone // one loss per sample
)

// CrossEntropyOptions configures CrossEntropy (see tensor.CrossEntropyOptions).
type CrossEntropyOptions = tensor.CrossEntropyOptions

// CrossEntropy returns the cross-entropy between softmax(logits) and the
// class targets, for logits [N, C] and len(target) == N, as one fused op
// (vectorised softmax rows with their log-sum-exp, then the loss; the
// gradient, softmax − target, is written over the kept probabilities).
// A target outside [0, C) that is not ignored panics, naming it and its
// position. With ReduceMean and every sample ignored the result is NaN, as
// in PyTorch.
func CrossEntropy(logits *Var, target []int64, o CrossEntropyOptions) *Var {
	// prob holds softmax(logits), reused by the backward pass, which
	// overwrites it with the gradient.
	y, prob := tensor.CrossEntropy(logits.Value, target, o)
	tgt := append([]int64(nil), target...)
	return record("CrossEntropy", y, []*Var{logits}, func(g *tensor.Tensor, s *sink) {
		// The graph runs backward once: overwrite the probabilities.
		s.add(0, tensor.CrossEntropyBackward(prob, g, tgt, o), true)
	})
}

// MSELoss returns the squared error between x and y (same shape),
// averaged, summed or per element as r says. Both inputs get gradients.
func MSELoss(x, y *Var, r Reduction) *Var {
	if !x.Value.SameShape(y.Value) {
		panic(fmt.Sprintf("autograd: MSELoss: shapes %v and %v differ", x.Value.Shape(), y.Value.Shape()))
	}
	d := tensor.Sub(x.Value, y.Value)
	var out *tensor.Tensor
	scale := float32(2)
	switch r {
	case ReduceNone:
		out = tensor.Square(d)
	case ReduceSum:
		out = tensor.Sum(tensor.Square(d))
	case ReduceMean:
		out = tensor.Mean(tensor.Square(d))
		scale = 2 / float32(d.Len())
	default:
		panic(fmt.Sprintf("autograd: MSELoss: unknown reduction %v", r))
	}
	return record("MSELoss", out, []*Var{x, y}, func(g *tensor.Tensor, s *sink) {
		var dx *tensor.Tensor
		if r == ReduceNone {
			dx = tensor.Mul(d, g)
			tensor.ScaleInto(dx, dx, scale)
		} else if g.Device().IsCPU() {
			dx = tensor.Scale(d, scale*g.Item())
		} else { // the same products, without reading g on the host
			dx = tensor.Mul(d, tensor.Scale(g, scale))
		}
		if s.need(1) {
			s.add(1, tensor.Neg(dx), true)
		}
		s.add(0, dx, true)
	})
}
