package recipe

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/data"
	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// The anchor classifier workload (the PyTorch anchors' ddp_mlp_bench.py):
// 60000 synthetic MNIST-shaped samples from seed 1234, DistributedSampler
// (world, rank, shuffle, seed 0) batches of 64 per rank without the last
// partial batch, model seed 0, SGD lr 0.01 momentum 0.9, cross-entropy.
const (
	SyntheticSamples = 60000
	SyntheticSeed    = 1234
	AnchorBatch      = 64
	AnchorLR         = 0.01
	Momentum         = 0.9
)

// The training set's pixel mean and standard deviation: MNIST inputs are
// standardised with them, as in PyTorch's MNIST example.
const PixelMean, PixelStd = 0.1307, 0.3081

// Classifier is the MLP or the LeNet CNN of package models, with the
// shape of one input sample.
type Classifier struct {
	Name  string // "mlp" or "cnn"
	Model *nn.Sequential
	Shape []int // [784] (mlp) or [1 28 28] (cnn)
}

// NewClassifier builds the classifier name ("mlp" or "cnn") with weights
// drawn from rng.
func NewClassifier(name string, rng *rand.Rand) (*Classifier, error) {
	switch name {
	case "mlp":
		return &Classifier{Name: name, Model: models.MLP(rng), Shape: []int{784}}, nil
	case "cnn":
		return &Classifier{Name: name, Model: models.LeNet(rng), Shape: []int{1, 28, 28}}, nil
	}
	return nil, fmt.Errorf("recipe: model %q: want mlp or cnn", name)
}

// NewSGD returns the classifier's optimizer over params: SGD with
// momentum 0.9 at learning rate lr.
func NewSGD(params []*autograd.Var, lr float64) (*optim.SGD, error) {
	return optim.NewSGD([]optim.Group{{Params: params, LR: lr}}, optim.SGDOptions{Momentum: Momentum})
}

// SyntheticLoader returns rank's loader of the anchor's synthetic data
// for samples of shape: DistributedSampler(world, rank, shuffle, seed 0),
// batches of AnchorBatch without the last partial one.
func SyntheticLoader(shape []int, world, rank int) (*data.Loader, error) {
	ds, err := datasets.NewSynthetic(SyntheticSamples, shape, 10, SyntheticSeed)
	if err != nil {
		return nil, err
	}
	sampler, err := data.NewDistributedSampler(ds.Len(), world, rank, true, 0, false)
	if err != nil {
		return nil, err
	}
	bs, err := data.NewBatchSampler(sampler, AnchorBatch, true)
	if err != nil {
		return nil, err
	}
	return data.NewLoader(ds, bs, data.Options{})
}

// MNISTLoader returns a loader of ds's samples in the order of order, in
// batches of batch (the last one shorter), standardised with PixelMean
// and PixelStd (Input gives a batch the model's shape).
func MNISTLoader(ds *datasets.MNIST, order []int, batch int) (*data.Loader, error) {
	ls, err := data.NewListSampler(order, 1, 0, false)
	if err != nil {
		return nil, err
	}
	bs, err := data.NewBatchSampler(ls, batch, false)
	if err != nil {
		return nil, err
	}
	return data.NewLoader(ds, bs, data.Options{Transform: func(b *data.Batch, _ *rand.Rand) error {
		x := b.X.Data()
		for i, v := range x {
			x[i] = (v - PixelMean) / PixelStd
		}
		return nil
	}})
}

// Accuracy returns the fraction of ds that model classifies correctly,
// evaluated in batches of 1000 on the model's device, with gradients off
// and the model in evaluation mode.
func Accuracy(model nn.Layer, ds *datasets.MNIST, shape []int) (float64, error) {
	defer nn.NoGrad(model)()
	model.SetTraining(false)
	defer model.SetTraining(true)
	dev := DeviceOf(model)
	order := make([]int, ds.Len())
	for i := range order {
		order[i] = i
	}
	l, err := MNISTLoader(ds, order, 1000)
	if err != nil {
		return 0, err
	}
	correct := 0
	for b, err := range l.Batches(context.Background()) {
		if err != nil {
			return 0, err
		}
		for i, p := range tensor.ArgMax(model.Forward(Input(b, shape, dev)).Value.To(tensor.CPU)) {
			if int64(p) == b.Labels[i] {
				correct++
			}
		}
	}
	return float64(correct) / float64(ds.Len()), nil
}

// Input is batch b's samples as the model's input, [B, shape...], on dev
// (on the CPU a view of b.X, valid as long as b is).
func Input(b *data.Batch, shape []int, dev tensor.Device) *autograd.Var {
	return autograd.NewVar(b.X.Reshape(append([]int{b.Size()}, shape...)...).To(dev), false)
}

// DeviceOf is where m's parameters are (the CPU for a model without any).
func DeviceOf(m nn.Module) tensor.Device {
	if ps := nn.Parameters(m); len(ps) > 0 {
		return ps[0].Value.Device()
	}
	return tensor.CPU
}
