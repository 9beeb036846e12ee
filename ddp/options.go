package ddp

import "fmt"

// Options configures Wrap. The zero value is PyTorch's DistributedDataParallel
// defaults: 1 MiB first bucket, 25 MiB buckets, gradients copied into the
// buckets, buffers broadcast from rank 0 before each synchronised forward,
// exact all-reduce, every parameter required to receive a gradient.
type Options struct {
	// FirstBucketCapBytes caps the first bucket (default 1 MiB), so that the
	// first reduction starts early in backward.
	FirstBucketCapBytes int64
	// BucketCapBytes caps every later bucket (default 25 MiB).
	BucketCapBytes int64

	// GradientAsBucketView makes every parameter's Grad a view into its
	// bucket, saving a gradient-sized copy in and out. Optimizers must zero
	// gradients in place (optim's ZeroGrad does).
	GradientAsBucketView bool

	// FindUnusedParameters lets a synchronised backward leave parameters
	// without a gradient: they contribute zero to the average. Without it
	// such a parameter is an error naming it.
	FindUnusedParameters bool

	// NoBroadcastBuffers keeps each rank's buffers (BatchNorm running
	// statistics) to itself instead of broadcasting rank 0's before each
	// synchronised forward.
	NoBroadcastBuffers bool

	// Hook reduces each bucket; nil means AllReduceHook{}.
	Hook CommHook

	// JoinDivideByWorldSize makes Join divide the gradient sum by the world
	// size, as PyTorch does by default, instead of by the number of ranks
	// that still have data (which keeps every step an exact average over
	// the samples actually seen).
	JoinDivideByWorldSize bool
}

func (o *Options) validate() error {
	if o.FirstBucketCapBytes < 0 || o.BucketCapBytes < 0 {
		return fmt.Errorf("ddp: Wrap: bucket caps must not be negative (first %d bytes, others %d bytes)",
			o.FirstBucketCapBytes, o.BucketCapBytes)
	}
	if o.FirstBucketCapBytes == 0 {
		o.FirstBucketCapBytes = DefaultFirstBucketCapBytes
	}
	if o.BucketCapBytes == 0 {
		o.BucketCapBytes = DefaultBucketCapBytes
	}
	if o.Hook == nil {
		o.Hook = AllReduceHook{}
	}
	return nil
}
