// Package fsdp is fully sharded data parallelism (ZeRO stage 3, PyTorch
// FSDP): parameters, gradients and optimizer state all exist only as 1/N
// shards between steps; each unit's parameters are all-gathered just
// before the unit's forward pass, gathered again just before its backward
// pass, and its gradients reduce-scattered as soon as they are ready.
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
// A GPT's forward through its blocks as units is GPT.ForwardThrough:
// m.Call(ctx, func(u *fsdp.Units) *autograd.Var { return g.ForwardThrough(idx, B, T, u.Run) }).
// It marks the outputs between blocks transient (autograd.Transient), as
// GPT.Forward does, so that a steady step reuses their storage; a forward
// written by hand should do the same.
//
// # Layout and communication
//
// Each unit's trainable parameters form one bucket of a zero.Plan, the
// parameters in no unit a root bucket; every bucket is split into N equal
// contiguous shards (the shard plan zero uses). Call all-gathers the root (held
// from the forward pass to the end of backward: embeddings tied to an
// output head live there) and prefetches unit 0; Units.Run(u, …) waits
// for unit u's gather, starts unit u+1's, runs the unit and releases its
// parameters. Backward uses ddp's bucket state machine (internal/dp/reducer) with
// a reduce-scatter per unit, started as soon as the unit's gradients are
// all ready, last unit first; the optimizer steps this rank's pieces of
// the parameters (1-D variables named like their parameters, see zero).
// Traffic per step with K units: one all-gather of the parameters for the
// forward pass, a second one of units 0 … K−3 for the backward pass (the
// last two are still in place), and one reduce-scatter: about ZeRO-3's
// 1.5× DDP's all-reduce bytes when K is large.
//
// # The backward all-gather
//
// An autograd op keeps the tensors it read (a Linear its weight) until
// backward has run through it, and package tensor cannot swap a tensor's
// storage. So units are gathered into two slot buffers that are reused:
// unit u into slot u%2, each slot as large as the largest unit of its
// parity. The forward graph therefore refers to no parameter memory but
// the root and the two slots, and during the forward pass each unit
// overwrites the one two before it. Units.Run marks the unit's output with
// an identity op ("fsdp.unit"); every backward op of the unit consumes
// that output, so the marker's backward runs first: it gathers the unit
// into its slot again (unless the slot still holds it) and starts the
// gather of unit u−1 into the other slot, whose previous unit (u+1) has
// finished its backward. The values the graph's closures read are
// therefore the unit's own again, and no forward compute is repeated
// (unlike a checkpoint-style recomputation, which would cost a third more
// compute). After the last gradient is ready the slots and the root are
// dropped. Peak parameter memory per rank is 1/N of the model plus the
// root and two units (PeakGatheredBytes; tested).
//
// Options.KeepAfterForward (PyTorch FSDP's reshard_after_forward=False)
// gives every unit a buffer of its own instead: nothing is gathered again
// for the backward pass, so a step moves DDP's bytes (one all-gather and
// one reduce-scatter per unit), at the price of holding the whole model's
// parameters during a step; between steps a rank still holds 1/N.
//
// The contract this puts on a unit's forward function (Units.Run): it is
// deterministic in its input, and it reads its parameters, in backward,
// only in ops that also consume (a value computed from) the unit's input,
// as layers do. An op on the parameters alone may pass them through or
// change their gradient (GPT's key-bias mask does), but its backward runs
// after the unit's slot is reused and must not read their values. A
// backward pass through the graph of an earlier Call (two Calls, then two
// backward passes) is reported as an error.
//
// A unit's parameters hold values only inside its Units.Run. A use
// outside is detected by the step's backward pass, before anything is
// reduced into the shards, and Backward fails naming the parameter and
// its unit (every rank still issues the step's collectives, so none
// hangs): a parameter whose gradient arrives although the backward pass
// never reached its unit (a unit's layer called directly), or whose
// gradient arrives before its unit's backward begins (a unit's weight
// tied into a later head). Gradients are armed per unit as its backward
// begins, which is what makes the second case visible at no cost. Not
// detected: an outside op on the parameters alone whose backward runs
// after the unit's (for instance one that reads them before the unit in
// the forward pass); its forward read zeros.
//
// # Buffers
//
// The gathered-parameter buffers (the root and the two slots) are kept
// between steps and reused, as are the unit gradient buffers, each handed
// back once its reduce-scatter is done and reused by a later unit or step
// (up to the root's and the three largest units' size; the root's is
// armed for the whole backward pass): a steady-state step allocates
// none of them, where fresh ones would cost zeroing or page faults and
// garbage collection every step. They hold no state between steps and
// are bounded by what a step's peak needs anyway; Memory.BufferBytes
// counts them. Options.FreeBuffers frees them after every backward pass
// instead, so that between steps a rank holds only 1/N of everything.
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
// Model held at once in the last step's forward and backward passes: the
// root plus two slots.
//
// As PyTorch FSDP with reshard_after_forward, except that the last two
// units stay gathered into backward (PyTorch keeps the last one) and the
// root stays gathered for the whole step (as PyTorch's root unit does).
//
// NoSync accumulates full gradients locally until the next synchronised
// Backward. Several synchronised backward passes without ZeroGrad between
// them accumulate their averaged gradients, as in PyTorch (as in zero:
// the first reduce-scatter after ZeroGrad writes over the shard, a later
// one is added). Plain autograd.Backward works when every trainable parameter
// receives a gradient (the last gradient hook completes the step). Join
// (uneven inputs) is not supported: a rank out of data would have to
// replay every per-unit gather of the forward and backward passes (zero
// supports it). Frozen parameters and buffers stay whole on every rank
// (copied from rank 0 at Wrap).
//
// # Concurrency
//
// A Model is driven by one goroutine; it starts none of its own (the
// process group runs the collectives).
package fsdp
