package data

import (
	"fmt"
	"slices"
)

// DefaultBucketWindow is the sorting window of BucketOptions when Window is
// zero, in batches.
const DefaultBucketWindow = 50

// BucketOptions configures length bucketing. The zero value works.
type BucketOptions struct {
	// Window is the number of batches whose samples are sorted by length
	// together; 0 means DefaultBucketWindow, a negative value sorts the
	// whole dataset at once. Larger windows save more padding; smaller ones
	// keep more randomness in which samples share a batch. It is rounded up
	// to a multiple of the world size.
	Window int
	// DropLast drops the last, smaller batch and the step that not every
	// rank could fill, instead of filling that step with batches repeated
	// from the start of the epoch.
	DropLast bool
}

// BucketSampler is the Bucket strategy: a distributed, length-aware batch
// sampler for variable-length samples. See BucketBatches for the plan.
//
// It is immutable and safe for concurrent use.
type BucketSampler struct {
	lengths                []int
	batchSize, numReplicas int
	rank                   int
	seed                   uint64
	opts                   BucketOptions
}

var _ BatchSampler = (*BucketSampler)(nil)

// NewBucketSampler returns a BucketSampler for samples of the given
// lengths (which it copies). It fails on a batch size < 1, numReplicas < 1,
// a rank outside [0, numReplicas) or a negative length.
func NewBucketSampler(lengths []int, batchSize, numReplicas, rank int, seed uint64, opts BucketOptions) (*BucketSampler, error) {
	if err := checkBucket(lengths, batchSize, numReplicas, rank); err != nil {
		return nil, err
	}
	return &BucketSampler{lengths: slices.Clone(lengths), batchSize: batchSize,
		numReplicas: numReplicas, rank: rank, seed: seed, opts: opts}, nil
}

func checkBucket(lengths []int, batchSize, numReplicas, rank int) error {
	if batchSize < 1 {
		return fmt.Errorf("data: bucket sampler: batch size %d, want ≥ 1", batchSize)
	}
	if err := checkWorld(len(lengths), numReplicas, rank); err != nil {
		return err
	}
	for i, l := range lengths {
		if l < 0 {
			return fmt.Errorf("data: bucket sampler: sample %d has negative length %d", i, l)
		}
	}
	return nil
}

// NumBatches returns the number of batches each rank gets per epoch.
func (b *BucketSampler) NumBatches() int {
	return bucketSteps(len(b.lengths), b.batchSize, b.numReplicas, b.opts.DropLast)
}

// Batches returns this rank's batches of epoch.
func (b *BucketSampler) Batches(epoch int) [][]int {
	out, _ := BucketBatches(b.lengths, b.batchSize, b.numReplicas, b.rank, b.seed, epoch, b.opts)
	return out
}

// bucketSteps is the number of steps (batches per rank) of an epoch.
func bucketSteps(n, batchSize, world int, dropLast bool) int {
	nb := numChunks(n, batchSize, dropLast)
	if dropLast {
		return nb / world
	}
	return (nb + world - 1) / world
}

// BucketBatches is the bucketing plan, a pure function of its arguments:
// rank's batches for epoch when samples of the given lengths are split
// among numReplicas ranks.
//
//  1. Draw Randperm(n, seed+epoch) from an MT19937 g seeded seed+epoch.
//  2. Cut the permutation into windows of Window·batchSize samples and
//     sort each window by length (stable, so ties keep their random
//     order).
//  3. Cut the result into batches of batchSize; the last one is smaller,
//     or dropped with DropLast.
//  4. Group consecutive batches into steps of numReplicas batches. Batches
//     of one step come from the same window and so have similar lengths:
//     ranks finish a step at about the same time. The last, incomplete step
//     is dropped with DropLast, else filled with the first batches of the
//     epoch.
//  5. Shuffle the steps with g (continuing its stream, PyTorch's randperm
//     loop) and give rank r the r-th batch of every step.
//
// Every rank gets the same number of batches. Across ranks each sample
// appears exactly once per epoch, except the samples of the filling
// batches (twice) or of the dropped batches (never).
func BucketBatches(lengths []int, batchSize, numReplicas, rank int, seed uint64, epoch int, opts BucketOptions) ([][]int, error) {
	if err := checkBucket(lengths, batchSize, numReplicas, rank); err != nil {
		return nil, err
	}
	n := len(lengths)
	g := NewMT19937(seed + uint64(epoch))
	perm := make([]int, n)
	randpermInto(perm, g)

	window := opts.Window
	if window == 0 {
		window = DefaultBucketWindow
	}
	span := n
	if window > 0 {
		window = (window + numReplicas - 1) / numReplicas * numReplicas
		span = window * batchSize
	}
	for lo := 0; lo < n; lo += span {
		w := perm[lo:min(lo+span, n)]
		slices.SortStableFunc(w, func(a, b int) int { return lengths[a] - lengths[b] })
	}

	batches := Chunk(perm, batchSize, opts.DropLast)
	steps := bucketSteps(n, batchSize, numReplicas, opts.DropLast)
	if steps == 0 {
		return [][]int{}, nil
	}
	// Step k is batches[k·W : (k+1)·W], the last one filled from the head.
	order := identity(steps)
	permute(order, g)
	out := make([][]int, steps)
	for i, k := range order {
		j := k*numReplicas + rank
		if j >= len(batches) {
			j %= len(batches) // fill from the head; len(batches) ≥ 1 here
		}
		out[i] = batches[j]
	}
	return out, nil
}

// Padding returns, for batches over samples of the given lengths, the
// number of real elements (the sum of lengths) and the number of padding
// elements a padding collate adds (each batch padded to its longest
// sample).
func Padding(lengths []int, batches [][]int) (real, pad int) {
	for _, b := range batches {
		longest := 0
		for _, i := range b {
			longest = max(longest, lengths[i])
			real += lengths[i]
		}
		pad += longest * len(b)
	}
	return real, pad - real
}
