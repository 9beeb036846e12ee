// Package zero is data-parallel training with sharded training state, as
// DeepSpeed ZeRO stages 1 and 2: every rank keeps the full parameters, but
// the optimizer state (Stage1) and also the averaged gradients (Stage2)
// exist only as 1/N shards, so the optimizer's memory per rank is 1/N of
// DDP's.
//
// # Usage
//
//	m, err := zero.Wrap(ctx, model, pg, zero.Options{Stage: zero.Stage2,
//		Optimizer: func(shard []nn.NamedParameter) (optim.Optimizer, error) {
//			return optim.NewAdamW([]optim.Group{{Params: zero.Vars(shard), LR: lr, WeightDecay: wd}}, optim.AdamDefaults())
//		}})
//	sched, err := optim.NewScheduler(m.Optimizer(), schedule) // optional
//	for each batch {
//		out, err := m.Call(ctx, func() *autograd.Var { return model.Forward(x) })
//		err = m.Backward(ctx, lossFn(out, y))
//		_, err = m.ClipGradNorm(ctx, 1, 2) // optional: the norm of the whole gradient
//		err = m.Step(ctx)                  // shard update, then all-gather
//		m.ZeroGrad()
//		sched.Step()
//	}
//
// # Layout
//
// The trainable parameters are grouped into buckets exactly as ddp groups
// them (the shared bucket plan, reverse registration order, ddp's caps) and laid
// out by the pure function PlanShards in one flat buffer in which every
// bucket is padded to a multiple of 16·N elements and split into N equal
// contiguous shards: rank r owns the r-th shard of every bucket, never a
// per-tensor greedy split. The module's parameter Values become views of
// that buffer. The part of each parameter inside this rank's shards is a
// Piece; the pieces, as 1-D variables named like their parameters, are
// what the shard optimizer steps (Options.Optimizer builds it from them).
// Because the optim updates are elementwise, stepping pieces gives the
// bits a full optimizer would.
//
// # Gradients
//
// The bucket state machine is the one ddp runs (internal/dp/reducer): gradient-ready
// hooks fill buckets during backward and start each bucket's reduction as
// soon as it is full, in the same order on every rank. Stage1 all-reduces
// each bucket (an average, DDP's traffic) in a flat gradient buffer the
// parameters' Grads are views of. Stage2 gives each bucket a full-size
// buffer for the step, the parameters' Grads views of it (autograd
// accumulates straight into it), reduce-scatters the bucket into this
// rank's gradient shard as soon as it is full (the same traffic in total
// with the parameter all-gather) and then drops the Grads, so that between
// steps only the 1/N shard holds gradients. The buckets are never rebuilt
// (the optimizer state follows their layout). The bucket buffers are kept
// for the next step (Memory.BufferBytes): a step needs them all during its
// backward pass anyway, and fresh ones would cost an allocation, zeroing
// or page faults and garbage collection every step. Options.FreeBuffers
// drops them instead.
//
// Backward may also be plain autograd.Backward: when every trainable
// parameter gets a gradient, the last gradient hook completes the step.
// NoSync accumulates gradients locally (in full) for the next synchronised
// step. Several synchronised backward passes without ZeroGrad between
// them accumulate their averaged gradients, as in PyTorch: under Stage2
// the first reduce-scatter after ZeroGrad writes over the shard (ZeroGrad
// itself clears nothing; ClipGradNorm and Step find an unwritten shard
// zero), a later one goes through a scratch shard that is then added.
//
// Join (uneven inputs) works for both stages: a rank out of data shadows
// the others' steps with zero gradients and, since it still owns a shard
// of the optimizer state, also their clipping (each ClipGradNorm and Step
// inside Join announces itself in a small all-reduce) and its shard's
// step, so every rank ends with the same parameters; gradients are
// averaged over the ranks still training, as ddp.Join does (tested equal
// to ddp.Join on uneven batches). fsdp does not support Join: a joined
// rank would have to replay the forward and backward passes' per-unit
// gathers.
//
// # Step
//
// ClipGradNorm computes the global gradient norm from the shards (one
// float64 per rank all-gathered, summed in rank order) and scales the
// shards; Step runs the shard optimizer and all-gathers every bucket's
// updated shards back into the flat parameter buffer, in place (each
// rank's shard is already in its slot).
//
// # State dicts and memory
//
// FullStateDict copies the model's parameters and buffers under nn
// state-dict keys. ShardedStateDict lists this rank's part of the model
// state as ShardedTensors (name, full shape, the flat row-major range this
// rank holds, the data) and OptimizerShards its optimizer state the same
// way (keys "optim.<parameter>.<buffer>" and "optim.step"); the entries of
// all ranks, saved by package checkpoint or anything else, load at any
// world size through LoadShardedStateDict and LoadOptimizerShards, which
// name the key of a missing, misshapen or foreign entry. Memory reports
// the bytes of parameters, gradients and optimizer state a rank keeps
// between steps; PeakRSSBytes the process's peak resident set.
//
// # Errors
//
// Wrap checks, as ddp.Wrap does, that every rank has the same model
// (naming the rank and the first differing parameter), and that the
// optimizer steps exactly this rank's pieces: an optimizer built on the
// full parameters is an error naming the first parameter it would update.
//
// # Concurrency
//
// A Model is driven by one goroutine; it starts none of its own.
package zero
