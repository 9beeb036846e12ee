// Package autograd is cohort's reverse-mode automatic differentiation:
// eager, define-by-run, in the style of PyTorch.
//
// # Graph
//
// Every op in this package computes its result immediately and, when at
// least one input requires grad, records a node on the result: the inputs
// and a backward function holding whatever the backward pass needs (saved
// inputs, softmax probabilities, pooling indices). There is no separate
// tape object; the graph is reachable from the output Var. Vars whose
// inputs all lack gradient tracking are plain leaves and record nothing.
//
// # Backward
//
// Backward (or BackwardGrad, which starts from a given output gradient,
// e.g. one received from another pipeline stage) first counts, for every
// node and leaf below the output, how many consumers will deliver a
// gradient to it. It then runs nodes whose gradients are complete, deepest
// first (except that an op on leaves alone, such as a mask of a
// parameter, runs as soon as it is ready, so that the parameter's
// gradient is not held back to the end of the pass), adding each leaf's
// contributions into its Grad in place. The
// moment a leaf's count reaches zero its gradient is final for the pass and
// its OnGradReady hooks run, on the goroutine calling Backward, before the
// rest of the graph is differentiated; built-in ops deliver weight
// gradients before computing their input's gradient, so a Linear layer's
// weight is ready one matrix product earlier. Distributed data parallelism relies
// on this to start all-reducing a bucket of gradients while backward
// continues: a hook may start asynchronous communication that reads
// v.Grad, which the engine does not touch again during the pass.
//
// Gradients accumulate: a Grad that exists is added into, never replaced,
// so it may be a view into a flat buffer (a DDP bucket); built-in ops such
// as Linear and Embedding write their weight gradients straight into such a
// Grad. Zero gradients in place (Var.ZeroGrad) between steps, or install
// a buffer with Var.SetGradBuffer: the pass then writes its first
// contribution over the buffer's contents instead of adding to them. Backward
// releases the saved tensors of the graph it ran through; a second Backward
// through the same graph panics.
//
// # No-grad mode
//
// There is no global switch. Ops record only when an input requires grad,
// so evaluation that should not build a graph turns tracking off on the
// model's parameters for its duration, `defer autograd.NoGrad(params...)()`
// (package nn offers nn.NoGrad for a whole module), and Detach gives a
// non-tracking alias of one Var.
//
// # Autocast
//
// Mixed precision follows the same rule: no global switch.
// `defer autograd.Autocast(tensor.BFloat16, params...)()` (nn.Autocast for
// a module) marks parameters, and an op's output carries the widest mark
// of its inputs, so everything computed from a marked parameter runs its
// matrix products (Linear and its fused forms, MatMul, the convolutions,
// Attention and AttentionQKV, forward and backward) in bfloat16 with
// float32 accumulation, as torch.autocast("cpu", dtype=torch.bfloat16)
// does; values, gradients, the other ops and the optimizer stay float32.
// The state lives on the leaves like NoGrad's, so two models (or a model
// and its evaluation copy) in one process do not affect each other, and
// the data-parallel wrappers see float32 parameters and gradients as
// before. See Autocast.
//
// # Fused ops
//
// Conv2dReLU, Conv2dReLUMaxPool2d and LinearReLU compute a layer and the
// activation (and pooling) after it as one op: the intermediate tensors
// are neither written nor saved, and the backward pass applies the ReLU
// mask (and routes the pooled gradient) as it reads the output gradient.
// Their values and gradients equal those of the ops in sequence. nn's
// Sequential uses them for matching runs of layers.
//
// # Custom ops
//
// Record wraps a value computed outside this package with a BackwardFunc,
// which is how tensor-parallel layers or pipeline boundaries become
// differentiable. RecordOwned does the same for an op that manages its
// storage as the built-in ones do: it may work in place on a gradient the
// engine tells it is private, hand its gradients over with their
// ownership, and own its output, so that its activations and gradients
// are recycled like theirs.
//
// # Errors
//
// Misuse is a programmer error and panics with a message prefixed
// "autograd:" naming the op and shapes (or comes from package tensor,
// prefixed "tensor:"). Vars are not safe for concurrent use.
package autograd
