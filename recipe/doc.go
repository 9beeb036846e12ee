// Package recipe holds cohort's reference workloads, one recipe each: the
// model, the data, the optimizer, the step and the metrics, so that the
// examples, `cohort bench` and the tests train a workload through one
// loop body rather than copies of it.
//
//   - Classifier: the anchor MLP or LeNet CNN (package models) on MNIST or
//     on synthetic MNIST-shaped samples, SGD with momentum 0.9,
//     cross-entropy (PyTorch's ddp_mlp_bench.py and examples/mnist).
//   - GPT: GPT-mini (or any models.GPTConfig, GPT-2 small included) on a
//     byte corpus, AdamW with betas 0.9/0.95 and clipping at norm 1.0
//     (gpt_mini.py, gpt_bench.py, zero_bench.py).
//
// A recipe knows nothing distributed: how a step's gradients are averaged
// is the caller's, handed in as a Runner (a model alone, or a
// data-parallel wrapper such as ddp.Model) or as a function run between
// backward and the update. Tracing goes through the step, on obs/trace's
// tracks, when the caller hands it a tracer.
package recipe
