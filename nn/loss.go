package nn

import "github.com/cohortml/cohort/autograd"

// CrossEntropy returns the mean cross-entropy of logits [N, C] against
// class targets with PyTorch's defaults: targets equal to −100 are ignored.
// For other reductions, label smoothing or another ignore index, call
// autograd.CrossEntropy with options.
func CrossEntropy(logits *autograd.Var, target []int64) *autograd.Var {
	return autograd.CrossEntropy(logits, target, autograd.CrossEntropyOptions{Ignore: true, IgnoreIndex: -100})
}

// MSE returns the mean squared error between x and y.
func MSE(x, y *autograd.Var) *autograd.Var { return autograd.MSELoss(x, y, autograd.ReduceMean) }
