package zero

import (
	"errors"
	"fmt"
	"github.com/cohortml/cohort/internal/dp/reducer"
	"github.com/cohortml/cohort/internal/dp/shard"
)

// Stage selects what is sharded.
type Stage int

const (
	// Stage1 shards the optimizer state: gradients are all-reduced in
	// buckets, as in DDP, and each rank steps only its shard.
	Stage1 Stage = 1
	// Stage2 also shards the gradients: each bucket is reduce-scattered as
	// soon as it is full, during backward, and each rank keeps only its
	// gradient shard.
	Stage2 Stage = 2
)

func (s Stage) String() string {
	switch s {
	case Stage1:
		return "zero1"
	case Stage2:
		return "zero2"
	}
	return fmt.Sprintf("Stage(%d)", int(s))
}

// OptimizerFunc builds the optimizer of one rank's shard. It receives the
// pieces of the parameters this rank owns (one Var per non-empty piece,
// named like the parameter, 1-D) and must build the optimizer over exactly
// those, e.g.
//
//	func(shard []nn.NamedParameter) (optim.Optimizer, error) {
//		return optim.NewAdamW([]optim.Group{{Params: zero.Vars(shard), LR: 1e-3, WeightDecay: 0.1}}, optim.AdamDefaults())
//	}
//
// An optimizer built over the full parameters instead is an error.
type OptimizerFunc = shard.OptimizerFunc

// Options configures Wrap. Optimizer is required; the zero value of
// every other field works.
type Options struct {
	Stage     Stage // Stage1 or Stage2 (0 means Stage2)
	Optimizer OptimizerFunc

	// FirstBucketCapBytes and BucketCapBytes cap the gradient buckets as
	// in ddp (defaults 1 MiB and 25 MiB).
	FirstBucketCapBytes, BucketCapBytes int64

	// FindUnusedParameters lets a synchronised backward leave parameters
	// without a gradient (they contribute zero); without it that is an
	// error naming them.
	FindUnusedParameters bool

	// NoBroadcastBuffers keeps each rank's buffers instead of broadcasting
	// rank 0's before each synchronised forward.
	NoBroadcastBuffers bool

	// FreeBuffers (Stage2) drops each bucket's full-gradient buffer once
	// the bucket is reduce-scattered, so that between steps only this
	// rank's 1/N gradient shard is resident; every step then allocates
	// (and faults in, and later collects) the buffers afresh. By default
	// the buffers are kept and reused by the next step (they exist during
	// every step's backward pass anyway, so the peak is the same);
	// Memory.BufferBytes counts them.
	FreeBuffers bool
}

func (o *Options) validate() error {
	if o.Stage == 0 {
		o.Stage = Stage2
	}
	if o.Stage != Stage1 && o.Stage != Stage2 {
		return fmt.Errorf("zero: Wrap: %v is not a stage (1 or 2; parameters are sharded by package fsdp)", o.Stage)
	}
	if o.Optimizer == nil {
		return errors.New("zero: Wrap: Options.Optimizer is nil (a function building the optimizer over this rank's shard)")
	}
	if o.FirstBucketCapBytes < 0 || o.BucketCapBytes < 0 {
		return fmt.Errorf("zero: Wrap: bucket caps must not be negative (first %d bytes, others %d bytes)", o.FirstBucketCapBytes, o.BucketCapBytes)
	}
	if o.FirstBucketCapBytes == 0 {
		o.FirstBucketCapBytes = reducer.DefaultFirstBucketCapBytes
	}
	if o.BucketCapBytes == 0 {
		o.BucketCapBytes = reducer.DefaultBucketCapBytes
	}
	return nil
}
