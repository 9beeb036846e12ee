// Package models holds the reference models that examples and benchmarks
// share, built exactly like the PyTorch anchor workloads so that results
// compare like with like:
//
//   - MLP: Linear(784,1024)-ReLU-Linear(1024,1024)-ReLU-Linear(1024,10),
//     1,863,690 parameters;
//   - LeNet: Conv2d(1,6,5,padding 2)-ReLU-MaxPool2d(2)-Conv2d(6,16,5)-ReLU-
//     MaxPool2d(2)-Flatten-Linear(400,120)-ReLU-Linear(120,84)-ReLU-
//     Linear(84,10), 61,706 parameters, on [N, 1, 28, 28] inputs;
//   - GPT: a GPT-2 style pre-LayerNorm byte-level language model with
//     learned positions and a weight-tied head (GPT-mini: vocab 256,
//     context 64, 4 layers, d 128, 4 heads, 834,304 parameters; GPT-2
//     small: vocab 50,257, context 1024, 12 layers, d 768, 12 heads,
//     124,439,808 parameters).
//
// Parameter names and order are PyTorch's ("0.weight", "3.bias", …; GPT
// uses "wte", "wpe", "h.{i}.…", "ln_f.…"). Initial values are drawn from an
// explicit generator with PyTorch's initialisation schemes; they are not
// bit-identical to torch.manual_seed.
package models
