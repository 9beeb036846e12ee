// Package optim implements the optimizers SGD (momentum, dampening,
// Nesterov, weight decay), Adam (L2 weight decay, optional AMSGrad) and
// AdamW, global-norm gradient clipping, and learning-rate schedules
// (StepLR, CosineAnnealingLR, LinearLR and Sequential to chain them), with
// the update formulas of PyTorch 1.13.
//
// # Layers
//
// Every optimizer is a thin driver over a pure update function
// (SGDUpdate, AdamUpdate) that works on plain []float32 slices: the
// parameter, its gradient and one slice per state tensor, plus the
// hyperparameters and the 1-based step number. The update is elementwise,
// so running it on any split of a flat buffer gives bit-for-bit the result
// of running it on the whole; a sharded optimizer (ZeRO) runs it on the
// shard of a flat parameter/gradient/state buffer it owns. The drivers
// (SGD, Adam) keep per-parameter state in that same layout: each state
// tensor is its own []float32 of the parameter's length.
//
// On amd64 with AVX2 the update loops run eight elements at a time in
// assembly that performs the same float32 operations in the same order,
// without fused multiply-adds; the Go loops also forbid fusion. Results are
// therefore identical on every path and for any GOAMD64 level, which keeps
// data-parallel replicas and sharded optimizers bit-for-bit in step.
//
// # Parameters and gradients
//
// Parameters are *autograd.Var leaves whose Value and Grad are contiguous
// tensors of equal shape. Step reads Grad and writes Value in place and
// skips parameters whose Grad is nil, as PyTorch does. ZeroGrad zeroes
// every Grad in place and never replaces it, so gradients that are views
// into a flat bucket stay views. Steps allocate nothing.
//
// Parameters are organised in groups (Group), each with its own learning
// rate and weight decay, like PyTorch's param_groups. A Scheduler moves
// the groups' learning rates along a Schedule.
//
// # Errors
//
// Constructors and LoadStateDict return errors naming the offending
// hyperparameter, group, parameter or state key; they wrap ErrInvalid.
// Programmer errors on the hot path (a Grad whose shape differs from its
// Value, a non-contiguous tensor, slices of unequal length) panic with a
// message prefixed "optim:".
//
// Optimizers and schedulers are not safe for concurrent use.
package optim
