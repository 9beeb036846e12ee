package autograd

import (
	"fmt"
	"math"

	"github.com/cohortml/cohort/tensor"
)

// Reduction says how a loss combines per-sample values.
type Reduction int

const (
	// ReduceMean averages over the samples that count (the default).
	ReduceMean Reduction = iota
	// ReduceSum adds them up.
	ReduceSum
	// ReduceNone returns one loss per sample.
	ReduceNone
)

func (r Reduction) String() string {
	switch r {
	case ReduceMean:
		return "mean"
	case ReduceSum:
		return "sum"
	case ReduceNone:
		return "none"
	}
	return fmt.Sprintf("Reduction(%d)", int(r))
}

// CrossEntropyOptions configures CrossEntropy. The zero value is PyTorch's
// default except that no target is ignored.
type CrossEntropyOptions struct {
	Reduction Reduction
	// When Ignore is set, samples whose target equals IgnoreIndex (PyTorch
	// uses −100) contribute nothing and do not count towards the mean.
	Ignore      bool
	IgnoreIndex int64
	// LabelSmoothing ε in [0, 1] mixes the one-hot target with the uniform
	// distribution: (1−ε)·onehot + ε/C.
	LabelSmoothing float64
}

// CrossEntropy returns the cross-entropy between softmax(logits) and the
// class targets, for logits [N, C] and len(target) == N, as one fused op
// (vectorised softmax rows with their log-sum-exp, then the loss; the
// gradient, softmax − target, is written over the kept probabilities).
// A target outside [0, C) that is not ignored panics, naming it and its
// position. With ReduceMean and every sample ignored the result is NaN, as
// in PyTorch.
func CrossEntropy(logits *Var, target []int64, o CrossEntropyOptions) *Var {
	lv := logits.Value
	if lv.Dims() != 2 || lv.Dim(0) != len(target) {
		panic(fmt.Sprintf("autograd: CrossEntropy: logits shape %v with %d targets (want [N, C] and N targets)", lv.Shape(), len(target)))
	}
	if o.LabelSmoothing < 0 || o.LabelSmoothing > 1 || math.IsNaN(o.LabelSmoothing) {
		panic(fmt.Sprintf("autograd: CrossEntropy: label smoothing %g outside [0, 1]", o.LabelSmoothing))
	}
	N, C := lv.Dim(0), lv.Dim(1)
	eps := o.LabelSmoothing
	lc := lv.Contiguous()
	x := lc.Data()
	// prob holds softmax(logits) (vectorised exp, float32 sums), reused by
	// the backward pass, which overwrites it with the gradient.
	prob := tensor.Empty(N, C) // written whole by SoftmaxRows
	lse := tensor.SoftmaxRows(prob, lc)
	losses := make([]float64, N)
	count := 0
	for i := 0; i < N; i++ {
		t := target[i]
		if o.Ignore && t == o.IgnoreIndex {
			continue
		}
		if t < 0 || t >= int64(C) {
			panic(fmt.Sprintf("autograd: CrossEntropy: target %d at position %d out of range for %d classes", t, i, C))
		}
		count++
		row := x[i*C : (i+1)*C]
		// −Σ_c q_c·log p_c with q = (1−ε)·onehot + ε/C.
		nll := lse[i] - float64(row[t])
		losses[i] = nll
		if eps != 0 {
			var sumLogit float64
			for _, v := range row {
				sumLogit += float64(v)
			}
			losses[i] = (1-eps)*nll + eps*(lse[i]-sumLogit/float64(C))
		}
	}
	var y *tensor.Tensor
	switch o.Reduction {
	case ReduceNone:
		y = tensor.New(N)
		for i, l := range losses {
			y.Data()[i] = float32(l)
		}
	case ReduceSum, ReduceMean:
		var s float64
		for _, l := range losses {
			s += l
		}
		if o.Reduction == ReduceMean {
			s /= float64(count)
		}
		y = tensor.Scalar(float32(s))
	default:
		panic(fmt.Sprintf("autograd: CrossEntropy: unknown reduction %v", o.Reduction))
	}
	tgt := append([]int64(nil), target...)
	return record("CrossEntropy", y, []*Var{logits}, func(g *tensor.Tensor, s *sink) {
		gd := g.Contiguous().Data()
		dx := prob // the graph runs backward once: overwrite the probabilities
		dd := dx.Data()
		for i := 0; i < N; i++ {
			row := dd[i*C : (i+1)*C]
			t := tgt[i]
			if o.Ignore && t == o.IgnoreIndex {
				clear(row)
				continue
			}
			var gi float32
			switch o.Reduction {
			case ReduceNone:
				gi = gd[i]
			case ReduceSum:
				gi = gd[0]
			default:
				gi = float32(float64(gd[0]) / float64(count))
			}
			u := gi * float32(eps/float64(C))
			for j, p := range row {
				row[j] = gi*p - u
			}
			row[t] -= gi * float32(1-eps)
		}
		s.add(0, dx, true)
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
		} else {
			dx = tensor.Scale(d, scale*g.Item())
		}
		if s.need(1) {
			s.add(1, tensor.Neg(dx), true)
		}
		s.add(0, dx, true)
	})
}
