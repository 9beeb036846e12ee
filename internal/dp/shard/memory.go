package shard

import (
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
)

// OptimizerFunc builds a sharded wrapper's optimizer over this rank's
// shard variables (zero.Options.Optimizer, fsdp.Options.Optimizer).
type OptimizerFunc func(shard []nn.NamedParameter) (optim.Optimizer, error)

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
