package tensor

import (
	"fmt"
	"math"
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

// crossEntropyCheck panics on bad arguments (naming op) and returns how
// many samples count.
func crossEntropyCheck(op string, logits *Tensor, target []int64, o CrossEntropyOptions) (N, C, count int) {
	if len(logits.shape) != 2 || logits.shape[0] != len(target) {
		panic(fmt.Sprintf("%s: logits shape %v with %d targets (want [N, C] and N targets)", op, logits.shape, len(target)))
	}
	if o.LabelSmoothing < 0 || o.LabelSmoothing > 1 || math.IsNaN(o.LabelSmoothing) {
		panic(fmt.Sprintf("%s: label smoothing %g outside [0, 1]", op, o.LabelSmoothing))
	}
	if o.Reduction < ReduceMean || o.Reduction > ReduceNone {
		panic(fmt.Sprintf("%s: unknown reduction %v", op, o.Reduction))
	}
	N, C = logits.shape[0], logits.shape[1]
	for i, t := range target {
		if o.Ignore && t == o.IgnoreIndex {
			continue
		}
		if t < 0 || t >= int64(C) {
			panic(fmt.Sprintf("%s: target %d at position %d out of range for %d classes", op, t, i, C))
		}
		count++
	}
	return N, C, count
}

// CrossEntropy returns the cross-entropy between softmax(logits) and the
// class targets, for logits [N, C] and len(target) == N: the loss ([N] for
// ReduceNone, else a scalar) and the probabilities prob [N, C] that
// CrossEntropyBackward turns into the gradient (vectorised softmax rows
// with their log-sum-exp, then the loss in float64). A target outside
// [0, C) that is not ignored panics, naming it and its position. With
// ReduceMean and every sample ignored the loss is NaN, as in PyTorch.
func CrossEntropy(logits *Tensor, target []int64, o CrossEntropyOptions) (loss, prob *Tensor) {
	const op = "tensor: CrossEntropy"
	N, C, count := crossEntropyCheck(op, logits, target, o)
	if logits.buf != nil {
		dev, be := deviceOf("CrossEntropy", logits)
		loss = NewOn(dev)
		if o.Reduction == ReduceNone {
			loss = NewOn(dev, N)
		}
		prob = NewOn(dev, N, C)
		be.CrossEntropy(loss, prob, logits, target, o)
		return loss, prob
	}
	eps := o.LabelSmoothing
	lc := logits.Contiguous()
	x := lc.Data()
	prob = Empty(N, C) // written whole by SoftmaxRows
	lse := SoftmaxRows(prob, lc)
	losses := make([]float64, N)
	for i := 0; i < N; i++ {
		t := target[i]
		if o.Ignore && t == o.IgnoreIndex {
			continue
		}
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
	switch o.Reduction {
	case ReduceNone:
		loss = New(N)
		for i, l := range losses {
			loss.storage[i] = float32(l)
		}
	default:
		var s float64
		for _, l := range losses {
			s += l
		}
		if o.Reduction == ReduceMean {
			s /= float64(count)
		}
		loss = Scalar(float32(s))
	}
	return loss, prob
}

// CrossEntropyBackward overwrites prob (CrossEntropy's, [N, C]) with the
// gradient of the logits given the loss's gradient g (CrossEntropy's loss
// shape) and returns it: g·(softmax − q) per row, rows of ignored samples 0.
func CrossEntropyBackward(prob, g *Tensor, target []int64, o CrossEntropyOptions) *Tensor {
	const op = "tensor: CrossEntropyBackward"
	N, C, count := crossEntropyCheck(op, prob, target, o)
	if !prob.IsContiguous() || (o.Reduction == ReduceNone && g.Len() != N) || (o.Reduction != ReduceNone && g.Len() != 1) {
		panicf("CrossEntropyBackward: probabilities %v (contiguous: %v), gradient %v, reduction %v", prob.shape, prob.IsContiguous(), g.shape, o.Reduction)
	}
	if prob.buf != nil || g.buf != nil {
		_, be := deviceOf("CrossEntropyBackward", prob, g)
		be.CrossEntropyBackward(prob, g, target, o)
		return prob
	}
	eps := o.LabelSmoothing
	gd := g.Contiguous().Data()
	dd := prob.Data()
	for i := 0; i < N; i++ {
		row := dd[i*C : (i+1)*C]
		t := target[i]
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
	return prob
}
