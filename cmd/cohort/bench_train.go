package main

import (
	"context"
	"flag"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"

	"cohort/autograd"
	"cohort/data"
	"cohort/datasets"
	"cohort/models"
	"cohort/nn"
	"cohort/optim"
	"cohort/tensor/gemmbench"
)

// The anchor workload (see the PyTorch anchors' ddp_mlp_bench.py): 60000
// synthetic MNIST-shaped samples from seed 1234, DistributedSampler(world 1,
// shuffle, seed 0) batches of 64 without the last partial batch, SGD lr
// 0.01 momentum 0.9, cross-entropy loss.
const (
	trainSamples     = 60000
	trainBatch       = 64
	trainDataSeed    = 1234
	trainModelSeed   = 0
	trainSamplerSeed = 0
)

// benchTrain runs `cohort bench train`: single-process training throughput
// of the anchor MLP or LeNet CNN, data loading included.
func benchTrain(args []string) int {
	fs := flag.NewFlagSet("cohort bench train", flag.ContinueOnError)
	model := fs.String("model", "mlp", "mlp or cnn")
	threads := fs.Int("threads", 1, "threads: GOMAXPROCS and the GEMM thread count (COHORT_NUM_THREADS)")
	steps := fs.Int("steps", 200, "timed steps")
	warmup := fs.Int("warmup", 20, "untimed steps before timing")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the timed steps to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cohort bench train: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *model != "mlp" && *model != "cnn" {
		fmt.Fprintf(os.Stderr, "cohort bench train: --model %q: want mlp or cnn\n", *model)
		return 2
	}
	if *threads < 1 || *steps < 1 || *warmup < 0 {
		fmt.Fprintf(os.Stderr, "cohort bench train: --threads %d, --steps %d, --warmup %d: want threads and steps ≥ 1, warmup ≥ 0\n", *threads, *steps, *warmup)
		return 2
	}
	// The kernels read their configuration once, at first use: set it
	// before anything runs one.
	if err := os.Setenv("COHORT_NUM_THREADS", strconv.Itoa(*threads)); err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench train: %v\n", err)
		return 1
	}
	runtime.GOMAXPROCS(*threads)
	desc, err := gemmbench.Describe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench train: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("train: model %s, batch %d, %d warm-up + %d timed steps, GOMAXPROCS %d, gemm %s\n",
		*model, trainBatch, *warmup, *steps, *threads, desc)
	r, err := trainRun(ctx, *model, *warmup, *steps, *cpuprofile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench train: %v\n", err)
		return 1
	}
	fmt.Printf("train: %d params, step %.2f ms, data %.1f%%, last loss %.4f, wall %.2f s\n",
		r.params, r.wall.Seconds()*1e3/float64(*steps), 100*r.data.Seconds()/r.wall.Seconds(), r.lastLoss, r.wall.Seconds())
	fmt.Printf("train: %s samples/s %.0f\n", *model, float64(trainBatch**steps)/r.wall.Seconds())
	return 0
}

type trainResult struct {
	params   int
	wall     time.Duration // the timed steps, data loading included
	data     time.Duration // time spent waiting for the next batch
	lastLoss float32
}

// trainRun builds the workload and runs warmup untimed and steps timed
// training steps.
func trainRun(ctx context.Context, modelName string, warmup, steps int, cpuprofile string) (trainResult, error) {
	shape := []int{784}
	if modelName == "cnn" {
		shape = []int{1, 28, 28}
	}
	ds, err := datasets.NewSynthetic(trainSamples, shape, 10, trainDataSeed)
	if err != nil {
		return trainResult{}, err
	}
	sampler, err := data.NewDistributedSampler(ds.Len(), 1, 0, true, trainSamplerSeed, false)
	if err != nil {
		return trainResult{}, err
	}
	bs, err := data.NewBatchSampler(sampler, trainBatch, true)
	if err != nil {
		return trainResult{}, err
	}
	loader, err := data.NewLoader(ds, bs, data.Options{})
	if err != nil {
		return trainResult{}, err
	}
	rng := rand.New(rand.NewPCG(trainModelSeed, 0))
	var model nn.Layer
	if modelName == "cnn" {
		model = models.LeNet(rng)
	} else {
		model = models.MLP(rng)
	}
	opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(model), LR: 0.01}}, optim.SGDOptions{Momentum: 0.9})
	if err != nil {
		return trainResult{}, err
	}

	// Batches walks the epochs in turn; pull one batch at a time so that
	// the wait for it can be timed. A batch stays valid until the next
	// pull.
	next, stop := iter.Pull2(epochs(ctx, loader))
	defer stop()
	var res trainResult
	res.params = nn.NumParameters(model)
	step := func() (data time.Duration, err error) {
		t := time.Now()
		b, err, ok := next()
		data = time.Since(t)
		if !ok {
			return data, fmt.Errorf("loader ended")
		}
		if err != nil {
			return data, err
		}
		opt.ZeroGrad()
		loss := nn.CrossEntropy(model.Forward(autograd.NewVar(b.X, false)), b.Labels)
		autograd.Backward(loss)
		opt.Step()
		res.lastLoss = loss.Value.Item()
		return data, nil
	}
	for range warmup {
		if _, err := step(); err != nil {
			return res, err
		}
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	for range steps {
		d, err := step()
		res.data += d
		if err != nil {
			return res, err
		}
	}
	res.wall = time.Since(start)
	return res, nil
}

// epochs yields the loader's batches epoch after epoch, forever (until ctx
// ends or the consumer stops).
func epochs(ctx context.Context, l *data.Loader) iter.Seq2[*data.Batch, error] {
	return func(yield func(*data.Batch, error) bool) {
		for {
			n := 0
			for b, err := range l.Batches(ctx) {
				if !yield(b, err) || err != nil {
					return
				}
				n++
			}
			if n == 0 {
				yield(nil, fmt.Errorf("loader yields no batches"))
				return
			}
		}
	}
}
