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

	// VerifyEvery, when positive, is the divergence guard: before the
	// forward pass of every VerifyEvery-th synchronised step (after steps
	// N, 2N, …) the Model runs VerifyReplicas, and Forward (or Call)
	// returns its error, naming each diverged rank and its first differing
	// parameter, on every rank, so the job stops there. Its cost per check
	// is one read of every parameter (a hash) and an all-gather of 8 bytes
	// per parameter tensor per rank: about 3 % of one MNIST MLP step at
	// world 2 (see the package comment), so N = 100 costs about 0.03 %.
	// The guard is off inside Join, where ranks that joined early
	// legitimately hold older parameters.
	VerifyEvery int

	// Span, when not nil, is called to trace the Model's work: it opens a
	// span named name on track and returns the function that closes it.
	// The Model opens one span per bucket on track "comm", named
	// "all_reduce bucket K", when the bucket's reduction is launched, and
	// closes it when the reduction is seen done (by a gradient hook's poll
	// or at the end of the step); and one span "wait for gradients" on
	// track "compute" for the time Backward spends after autograd returned
	// (the exposed communication). The track names are those of package
	// obs/trace, whose Tracer.Begin(track, name).End fits. Span is called
	// on the goroutine driving the Model.
	Span func(track, name string) (end func())
}

func (o *Options) validate() error {
	if o.FirstBucketCapBytes < 0 || o.BucketCapBytes < 0 {
		return fmt.Errorf("ddp: Wrap: bucket caps must not be negative (first %d bytes, others %d bytes)",
			o.FirstBucketCapBytes, o.BucketCapBytes)
	}
	if o.VerifyEvery < 0 {
		return fmt.Errorf("ddp: Wrap: VerifyEvery %d: want 0 (off) or a number of steps", o.VerifyEvery)
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
