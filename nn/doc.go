// Package nn provides neural-network modules on top of autograd: layers
// (Linear, Conv2d, pooling, activations, Dropout, LayerNorm, BatchNorm2d,
// Embedding), containers (Sequential), transformer pieces
// (CausalSelfAttention, MLP, Block), losses, and state dicts.
//
// # Modules
//
// A Module lists its parameters and buffers by dotted name in a stable
// order: registration order, children depth-first, matching the names and
// order of the equivalent PyTorch module (Sequential children are "0",
// "1", …). DDP buckets and optimizer state follow this order, so it is the
// same on every rank. Layers are plain structs with exported fields, built
// by New* constructors that draw PyTorch's default initialisation from an
// explicit *rand.Rand: kaiming_uniform(a=√5) weights and U(±1/√fan_in)
// biases for Linear and Conv2d, N(0, 1) for Embedding, ones and zeros for
// normalisation layers.
//
// Sequential.Forward runs a Conv2d followed by ReLU (and by a
// non-overlapping MaxPool2d), and a Linear followed by ReLU, as single
// fused autograd ops that compute the same values and gradients without
// materialising the intermediate tensors; calling the layers' Forward one
// by one gives the unfused ops.
//
// Modules start in training mode; SetTraining(false) switches Dropout off
// and makes BatchNorm2d use its running statistics. NoGrad(m) turns off
// gradient tracking of m's parameters for an evaluation pass.
//
// # State dicts
//
// StateDict maps names to the module's live tensors; LoadStateDict copies
// into them and reports every missing, unexpected or mis-shaped key in one
// error wrapping ErrStateDict. Serialising a state dict to a file is the
// checkpoint layer's job.
//
// Programmer errors (bad sizes, wrong input rank) panic with messages
// prefixed "nn:" (or "autograd:"/"tensor:" from the layers below).
// Modules are not safe for concurrent use.
package nn
