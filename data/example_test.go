package data_test

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/data"
	"github.com/cohortml/cohort/tensor"
)

// Each rank builds the same sampler with its own rank; the loader yields
// that rank's batches, identical to PyTorch's DistributedSampler order.
func Example() {
	x := tensor.New(10, 2) // 10 samples of 2 features
	labels := make([]int64, 10)
	ds, _ := data.NewTensorDataset(x, labels, nil)

	const world, rank = 2, 1
	sampler, err := data.NewDistributedSampler(ds.Len(), world, rank, true, 0, false)
	if err != nil {
		panic(err)
	}
	batches, _ := data.NewBatchSampler(sampler, 2, false)
	loader, _ := data.NewLoader(ds, batches, data.Options{Workers: 2})

	ctx := context.Background()
	for epoch := range 2 {
		loader.SetEpoch(epoch)
		for b, err := range loader.Batches(ctx) {
			if err != nil {
				panic(err)
			}
			fmt.Println(epoch, b.Step, b.Indices, b.X.Shape())
		}
	}
	// Output:
	// 0 0 [1 5] [2 2]
	// 0 1 [9 8] [2 2]
	// 0 2 [2] [1 2]
	// 1 0 [6 2] [2 2]
	// 1 1 [8 3] [2 2]
	// 1 2 [4] [1 2]
}

// A saved State resumes exactly where the run stopped.
func ExampleLoader_Restore() {
	ds, _ := data.NewTensorDataset(tensor.New(6, 1), nil, nil)
	batches, _ := data.NewBatchSampler(data.RandomSampler{N: 6, Seed: 1}, 2, false)
	loader, _ := data.NewLoader(ds, batches, data.Options{})
	ctx := context.Background()
	for b := range loader.Batches(ctx) {
		fmt.Println("first run:", b.Indices)
		break // e.g. the job is preempted after one step
	}
	saved := loader.State() // store it with the checkpoint

	resumed, _ := data.NewLoader(ds, batches, data.Options{})
	if err := resumed.Restore(saved); err != nil {
		panic(err)
	}
	for b := range resumed.Batches(ctx) {
		fmt.Println("resumed:", b.Indices)
	}
	// Output:
	// first run: [1 5]
	// resumed: [2 0]
	// resumed: [3 4]
}

// Bucketing batches samples of similar length together, gives every rank
// the same number of batches, and makes the ranks' batches of one step
// similar too (here, step 0: lengths 48+50 on rank 0 and 51+52 on rank 1).
func ExampleBucketBatches() {
	lengths := []int{5, 50, 7, 48, 6, 52, 4, 51}
	for rank := range 2 {
		b, _ := data.BucketBatches(lengths, 2, 2, rank, 0, 0, data.BucketOptions{})
		fmt.Print("rank ", rank, ":")
		for _, batch := range b {
			fmt.Print(" ", batch, "→")
			for _, i := range batch {
				fmt.Print(" ", lengths[i])
			}
			fmt.Print(";")
		}
		fmt.Println()
	}
	// Output:
	// rank 0: [3 1]→ 48 50; [6 0]→ 4 5;
	// rank 1: [7 5]→ 51 52; [4 2]→ 6 7;
}
