package models

import (
	"math/rand/v2"

	"github.com/cohortml/cohort/nn"
)

// MLP returns the anchor multi-layer perceptron for flattened 28×28 images:
// Linear(784,1024)-ReLU-Linear(1024,1024)-ReLU-Linear(1024,10).
func MLP(rng *rand.Rand) *nn.Sequential {
	return nn.NewSequential(
		nn.NewLinear(rng, 784, 1024, true), nn.ReLU{},
		nn.NewLinear(rng, 1024, 1024, true), nn.ReLU{},
		nn.NewLinear(rng, 1024, 10, true),
	)
}

// LeNet returns the anchor LeNet-5-style CNN for [N, 1, 28, 28] images.
func LeNet(rng *rand.Rand) *nn.Sequential {
	return nn.NewSequential(
		nn.NewConv2d(rng, 1, 6, 5, nn.Conv2dOptions{Padding: 2}), nn.ReLU{}, nn.NewMaxPool2d(2),
		nn.NewConv2d(rng, 6, 16, 5, nn.Conv2dOptions{}), nn.ReLU{}, nn.NewMaxPool2d(2),
		nn.Flatten{},
		nn.NewLinear(rng, 400, 120, true), nn.ReLU{},
		nn.NewLinear(rng, 120, 84, true), nn.ReLU{},
		nn.NewLinear(rng, 84, 10, true),
	)
}
