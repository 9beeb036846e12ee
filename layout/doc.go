// Package layout trains a GPT on any mix of data, pipeline and tensor
// parallelism (DP × PP × TP): it arranges the ranks as a distributed.Mesh
// dp × pp × tp, cuts the model into pipeline stages made of
// tensor-parallel pieces (tp.GPTStage), runs them under a pipeline
// schedule (pipeline.Pipeline) and averages the gradients over the
// data-parallel replicas.
//
// Build returns this rank's Trainer; a training step is
//
//	loss, err := tr.Step(ctx, idx, targets) // forward, backward, gradient sync
//	norm, err := tr.ClipGradNorm(ctx, 1.0)  // global norm over the whole model
//	opt.Step()                              // an optimizer over tr.Parameters()
//
// and every rank of the mesh runs the same sequence of calls.
//
// # Layout
//
// Ranks are numbered row-major over dp × pp × tp (tp fastest, as in
// Megatron-LM), so the ranks of a tensor-parallel group are neighbours.
// Pipeline stage s lives on pipeline rank s mod PP (with Virtual stages
// per rank for the interleaved schedule); each stage is sharded across its
// TP ranks; each (pp, tp) coordinate is replicated DP times. A size of 1
// along any dimension is allowed, so one process (1 × 1 × 1) runs the same
// code.
//
// # What crosses which group
//
//   - tp: the collectives inside the stages (Megatron's f and g, the
//     vocabulary-parallel embedding and cross-entropy); the activation
//     between stages and its gradient are replicated over tp.
//   - pp: activations and their gradients between stages, the loss, and
//     the sum of the tied token-embedding gradient between the first and
//     the last stage (the same tp coordinate holds the same vocabulary
//     rows on both).
//   - dp: an all-reduce (average) of every gradient this rank holds,
//     before clipping and the optimizer: one bucket per stage, started by
//     the data-parallel wrappers' bucket state machine as soon as the
//     pipeline reports the stage's last backward pass (overlapping the
//     pipeline), then one for the tied embedding after the step.
//
// # Clipping
//
// ClipGradNorm computes the 2-norm of the whole model's gradient exactly
// as optim.ClipGradNorm on the unsharded model: a sharded parameter counts
// its shard on every tp rank, a replicated one (LayerNorms, wpe, biases of
// row-parallel layers) once per stage, and the tied token embedding once
// (the last stage's copy is left out). The partial sums are all-reduced
// over tp and then over pp; dp replicas hold identical gradients after the
// average, so they compute the same norm without talking.
//
// # Equality
//
// The tests train GPT-mini under dp × pp, pp × tp and dp × pp × tp and
// compare losses, gradient norms, gathered gradients and final parameters
// with one process (models.GPT, optim.ClipGradNorm, AdamW) to float32
// rounding.
//
// # Errors
//
// Build checks the configuration on every rank before any other
// communication (mesh sizes against the world, microbatches against the
// batch, stages against layers, heads, vocabulary and MLP width against
// tp) and then all-gathers a fingerprint of it, so every rank returns an
// error naming the sizes, or the ranks that disagree, instead of hanging.
// A failed step breaks the Trainer (every later call returns the first
// error); the pipeline aborts its groups so that its peers fail promptly.
package layout
