package shard

import (
	"fmt"
	"slices"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// OptimizerFunc builds a sharded wrapper's optimizer over this rank's
// shard variables (zero.Options.Optimizer, fsdp.Options.Optimizer).
type OptimizerFunc func(shard []nn.NamedParameter) (optim.Optimizer, error)

// BuildOptimizer builds a sharded wrapper's optimizer with build over
// shard (this rank's pieces as Vars, their Grads allocated and zero) and
// makes sure it steps exactly that shard: it marks every gradient of the
// model's params (shapes[i] is parameter i's full shape) and of the
// shard, lets the optimizer zero its own, and looks at what was zeroed.
// pkg prefixes errors; uncovered ends the error for a piece of the shard
// the optimizer leaves out. Every gradient is as it was afterwards.
func BuildOptimizer(pkg string, build OptimizerFunc, params []nn.NamedParameter, shapes [][]int, shard []nn.NamedParameter, rank int, uncovered string) (optim.Optimizer, error) {
	opt, err := build(slices.Clone(shard))
	if err != nil {
		return nil, fmt.Errorf("%s: Wrap: building the shard optimizer: %w", pkg, err)
	}
	saved := make([]*tensor.Tensor, len(params))
	for i, np := range params {
		saved[i] = np.Param.Grad
		np.Param.Grad = tensor.Full(1, shapes[i]...)
	}
	for _, s := range shard {
		s.Param.Grad.Fill(1)
	}
	opt.ZeroGrad()
	for i, np := range params {
		if err == nil && slices.Contains(np.Param.Grad.Data(), 0) {
			err = fmt.Errorf("%s: Wrap: the optimizer was built on the full parameters (it zeroes the gradient of %q); build it from the shard parameters Options.Optimizer receives", pkg, np.Name)
		}
		np.Param.Grad = saved[i]
	}
	for _, s := range shard {
		if err == nil && slices.ContainsFunc(s.Param.Grad.Data(), func(x float32) bool { return x != 0 }) {
			err = fmt.Errorf("%s: Wrap: the optimizer does not cover this rank's shard of %q (rank %d)%s", pkg, s.Name, rank, uncovered)
		}
		s.Param.Grad.Fill(0)
	}
	if err != nil {
		return nil, err
	}
	return opt, nil
}

// Memory is what one rank keeps resident for training, in bytes.
type Memory struct {
	ParamBytes     int64 // parameter values (the flat buffer, padding included)
	GradBytes      int64 // gradients kept between steps
	OptimizerBytes int64 // optimizer state tensors
	// BufferBytes is workspace kept for reuse by the next step (full
	// gradient buckets, gathered-parameter slots), as a caching allocator
	// keeps freed blocks: it holds no state between steps, is bounded by
	// what a step needs at its peak anyway, and is zero with FreeBuffers.
	BufferBytes int64
}

// OptimizerBytes returns the bytes of an optimizer's state tensors.
func OptimizerBytes(opt optim.Optimizer) int64 {
	var n int64
	for _, t := range opt.StateDict().Tensors {
		n += 4 * int64(t.Len())
	}
	return n
}
