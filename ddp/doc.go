// Package ddp is distributed data parallel training: every rank holds a
// replica of the model, trains it on its own share of the data, and the
// replicas stay identical because their gradients are averaged across the
// process group after every backward pass.
//
// # Usage
//
//	m, err := ddp.Wrap(ctx, model, pg, ddp.Options{})
//	...
//	for each batch {
//		out, err := m.Forward(ctx, x)
//		loss := lossFn(out, y)
//		err = m.Backward(ctx, loss) // gradients are now the group average
//		opt.Step()
//		opt.ZeroGrad()
//	}
//
// Wrap checks that every rank has the same parameters and buffers (names,
// shapes, dtypes; a mismatch is an error naming the rank and the
// parameter; CheckSameModel is that check on its own) and copies rank 0's
// values to every rank.
//
// A module whose forward pass is not Forward(x) (a language model's
// Forward(idx, B, T)) is wrapped with WrapModule and run with Call:
//
//	m, err := ddp.WrapModule(ctx, gpt, pg, ddp.Options{})
//	logits, err := m.Call(ctx, func() *autograd.Var { return gpt.Forward(idx, B, T) })
//
// The backward pass may be Model.Backward or plain autograd.Backward:
// when every trainable parameter receives a gradient, the step completes
// inside the last gradient hook, so autograd.Backward returns with the
// gradients averaged. Otherwise (unused parameters) only Backward can
// finish the step, and the next Forward or Call says so.
//
// # Buckets and overlap
//
// Gradients are reduced in buckets: parameters are grouped, in the order
// their gradients are expected to become ready, into flat contiguous
// float32 buffers, the first capped at Options.FirstBucketCapBytes (1 MiB)
// and the others at Options.BucketCapBytes (25 MiB); a bucket closes with
// the parameter that makes it reach its cap. The assignment is the pure
// function PlanBuckets. Before the first step the expected order is the
// reverse of the parameter order; after the first synchronised step the
// buckets are rebuilt in the order the gradients actually became ready on
// the lowest active rank (broadcast, so every rank uses the same plan).
//
// Every parameter's slot in the flat buffer starts on a 64-byte boundary,
// so kernels writing gradients into bucket views store whole cache lines.
//
// The bucket bookkeeping is the state machine of internal/dp/reducer,
// shared with the sharded wrappers (zero, fsdp); Model supplies its I/O.
// Autograd's per-parameter gradient-ready hooks mark parameters ready
// during backward. When every parameter of a bucket is ready, and every
// earlier bucket has been started, the bucket's reduction starts
// asynchronously through the communication hook while backward continues
// with the remaining layers. Buckets start strictly in plan order on every
// rank, so the collectives are issued in the same order everywhere. After
// autograd's backward returns, Backward waits for the outstanding
// reductions and leaves the averaged gradient in each parameter's Grad.
//
// With Options.GradientAsBucketView each parameter's Grad is a view into
// its bucket, so autograd accumulates straight into the buffer that is
// reduced (no copy in, no copy out). Optimizers must then zero gradients in
// place rather than replace the Grad tensor; a replaced Grad is detected
// and copied back into the bucket, which keeps results correct at the cost
// of the copy. Without the option, gradients are copied into the bucket
// when ready and the average is copied back.
//
// # Communication hooks
//
// Options.Hook chooses how a bucket is reduced: AllReduceHook (the
// default, an exact float32 average), CompressHook from NewFP16Hook and
// NewBF16Hook (half the bytes on the wire at the cost of half-precision
// rounding), and PowerSGD from NewPowerSGD (low-rank compression with
// error feedback and warm start). A hook sees each bucket as a Bucket and
// may issue any collectives, in an order every rank shares.
//
// # Gradient accumulation, unused parameters, buffers, uneven inputs
//
// NoSync runs forward and backward passes without communication;
// gradients accumulate locally and the next synchronised Backward reduces
// the sum. A parameter that takes no part in a synchronised backward is an
// error naming it unless Options.FindUnusedParameters is set, in which case
// it contributes a zero gradient. Buffers (BatchNorm running statistics)
// are broadcast from rank 0 before every synchronised forward unless
// Options.NoBroadcastBuffers is set; the statistics a forward pass computes
// stay per-rank, as in PyTorch. Join lets ranks with fewer batches finish
// early: they shadow the collectives of the ranks still training, with
// zero gradients, until every rank has joined.
//
// # Statistics and tracing
//
// Stats reports the time spent in forward and backward and, kept apart,
// the gradient communication's busy time (the union of the buckets'
// launch-to-done intervals; gaps between buckets are not counted), the
// part of it hidden behind backward, and the exposed time: what waiting
// for and finishing the reductions added to the step after autograd
// returned. Options.Span traces the same events as spans (one per bucket's
// all-reduce, one for the exposed wait) without ddp depending on a tracer:
// obs/trace's Tracer.Begin(track, name).End fits it.
//
// # Replica check and divergence guard
//
// VerifyReplicas compares a hash of every parameter across the ranks and
// names the first rank and parameter that diverged from rank 0.
// Options.VerifyEvery runs it before every N-th synchronised step and
// stops the job (Forward returns the error on every rank). Its cost per
// check is one read of the parameters and an all-gather of 8 bytes per
// parameter tensor per rank. For the MNIST MLP (1.86 M parameters in 6
// tensors) at world 2, BenchmarkVerifyReplicas measured 2.5–11 ms per
// check (median 5.2 ms) on a shared 2-core machine at load 19, where a
// training step (BenchmarkWorld2/mlp/view) took 140–245 ms: about 3 % of
// one step per check, so VerifyEvery 100 costs about 0.03 % of training.
// The hash reads 3–4 GB/s on one core (BenchmarkHashFloats).
//
// # Models on a device
//
// A model moved to an accelerator (nn.To) before Wrap keeps its flat
// gradient buffer there: the gradients are views of it (whatever
// GradientAsBucketView says), Wrap's and Call's broadcasts and each
// bucket's all-reduce run on the device tensors through
// distributed.BroadcastTensor and AllReduceTensor, and nothing crosses to
// the host. The group's backend must take device tensors (nccl, which
// distributed.Init picks for a CUDA device): another is refused at Wrap
// naming the device and the backend. Only AllReduceHook runs on device
// buckets (the compression hooks compute on host slices), and
// VerifyEvery, which hashes host parameters, is refused. A model whose
// tensors are on two devices is refused naming both.
//
// # Differences from PyTorch 1.13
//
//   - PyTorch reduces everything in one bucket during the first iteration
//     (unless find_unused_parameters is set); here the first iteration
//     already uses capped buckets in reverse parameter order.
//   - FindUnusedParameters does not walk the autograd graph after forward:
//     parameters whose gradient hook did not fire are found when autograd's
//     backward returns, and their buckets are reduced then (less overlap
//     in that step). A parameter unused on every rank gets a zero Grad
//     rather than none.
//   - Under Join, gradients are divided by the number of ranks still
//     training (Options.JoinDivideByWorldSize restores PyTorch's division
//     by the world size), and buffers come from the lowest training rank
//     rather than the highest.
//   - The fp16/bf16 hooks divide in float32 before rounding once; PyTorch
//     rounds, then divides in half precision.
//   - PowerSGD keeps error feedback for the compressed matrices only; the
//     exactly reduced vectors have no error to remember.
//
// # Concurrency
//
// A Model is driven by one goroutine. The process group runs the
// reductions in the background; ddp starts no goroutine that outlives a
// call except those the process group owns.
package ddp
