// Package fsdp is fully sharded data parallelism (ZeRO stage 3, PyTorch
// FSDP): parameters, gradients and optimizer state all exist only as 1/N
// shards between steps; each unit's parameters are all-gathered just
// before the unit's forward pass and its gradients reduce-scattered as
// soon as they are ready in backward.
//
// # Usage
//
// Wrap takes the model and its units (submodules: the layers of an
// nn.Sequential, a GPT's transformer blocks). The forward function runs
// each unit through Units.Run:
//
//	units, fwd := fsdp.SequentialUnits(seq)         // or the blocks of a GPT
//	m, err := fsdp.Wrap(ctx, seq, units, pg, fsdp.Options{Optimizer: func(shard []nn.NamedParameter) (optim.Optimizer, error) {
//		return optim.NewAdamW([]optim.Group{{Params: zero.Vars(shard), LR: lr, WeightDecay: wd}}, optim.AdamDefaults())
//	}})
//	for each batch {
//		out, err := m.Call(ctx, fwd(x))             // func(u *fsdp.Units) *autograd.Var
//		err = m.Backward(ctx, lossFn(out, y))
//		_, err = m.ClipGradNorm(ctx, 1, 2)
//		err = m.Step(ctx)                          // local: no communication
//		m.ZeroGrad()
//	}
//	sd, err := m.FullStateDict(ctx)                // nn state-dict keys, every rank
//
// # Layout and communication
//
// Each unit's trainable parameters form one bucket of a zero.Plan, the
// parameters in no unit a root bucket; every bucket is split into N equal
// contiguous shards (zero.PlanShards). Call all-gathers the root (held for
// the whole forward pass: embeddings tied to an output head live there)
// and prefetches unit 0; Units.Run(u, …) waits for unit u's gather, starts
// unit u+1's, runs the unit and releases its parameters. Backward uses
// ddp's bucket state machine (ddp/reducer) with a reduce-scatter per unit,
// started as soon as the unit's gradients are all ready, last unit first;
// the optimizer steps this rank's pieces of the parameters (1-D variables
// named like their parameters, see zero). Traffic per step: one all-gather
// and one reduce-scatter of the parameters, DDP's all-reduce bytes (ZeRO-3
// gathers a second time for backward, 1.5×; this package does not, see
// below).
//
// # Memory, and what differs from PyTorch
//
// Between steps a released parameter's Value is a one-element broadcast
// view of the parameter's shape (autograd checks shapes, never reads it):
// reading it is an error; use FullStateDict, or ShardedStateDict and
// LoadShardedStateDict (loadable at another world size; OptimizerShards
// and LoadOptimizerShards do the same for the optimizer state, see zero). Memory reports
// the parameter, gradient and optimizer bytes this rank holds: 1/N of each
// between steps. PeakGatheredBytes is the most gathered parameter bytes the
// Model held at once during a forward pass: the root plus two units.
//
// Unlike PyTorch's reshard-after-forward, a released unit's gathered
// values stay reachable from the autograd graph, whose backward closures
// captured them, until backward has run through the unit; backward
// therefore needs no second all-gather, and the process's peak memory
// during a step includes every unit's gathered parameters (freed by the
// garbage collector after backward). Bounding that peak needs a tensor
// whose storage can be dropped and refilled, which package tensor does not
// offer.
//
// NoSync accumulates full gradients locally until the next synchronised
// Backward. Plain autograd.Backward works when every trainable parameter
// receives a gradient (the last gradient hook completes the step). Join
// (uneven inputs) is not supported. Frozen parameters and buffers stay
// whole on every rank (copied from rank 0 at Wrap).
//
// # Concurrency
//
// A Model is driven by one goroutine; it starts none of its own (the
// process group runs the collectives).
package fsdp
