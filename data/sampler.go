package data

import (
	"fmt"
	"slices"
)

// Sampler orders dataset indices for one epoch.
//
// Indices is a pure function of the sampler's configuration and the epoch:
// calling it twice gives equal slices, on any machine. The returned slice
// is owned by the caller.
type Sampler interface {
	// Len returns the number of indices one epoch yields.
	Len() int
	// Indices returns the indices of epoch.
	Indices(epoch int) []int
}

// BatchSampler groups indices into batches for one epoch.
//
// Batches is a pure function of the configuration and the epoch, and
// returns NumBatches() batches owned by the caller.
type BatchSampler interface {
	NumBatches() int
	Batches(epoch int) [][]int
}

// SequentialSampler yields 0, 1, …, N−1 every epoch.
type SequentialSampler struct {
	N int
}

var _ Sampler = SequentialSampler{}

// Len returns N (0 when N is negative).
func (s SequentialSampler) Len() int { return max(s.N, 0) }

// Indices returns 0..N−1.
func (s SequentialSampler) Indices(int) []int { return identity(s.Len()) }

// RandomSampler yields a permutation of 0..N−1 that changes every epoch:
// Randperm(N, Seed+epoch), which is what PyTorch's RandomSampler yields
// when its generator is re-seeded with seed+epoch before each epoch (and
// what DistributedSampler with one replica yields).
type RandomSampler struct {
	N    int
	Seed uint64
}

var _ Sampler = RandomSampler{}

// Len returns N (0 when N is negative).
func (s RandomSampler) Len() int { return max(s.N, 0) }

// Indices returns the permutation of epoch.
func (s RandomSampler) Indices(epoch int) []int {
	return Randperm(s.Len(), s.Seed+uint64(epoch))
}

// FixedBatchSampler cuts a Sampler's indices into batches of BatchSize in
// order, like PyTorch's BatchSampler: the last batch is smaller, or dropped
// when DropLast is set.
type FixedBatchSampler struct {
	sampler   Sampler
	batchSize int
	dropLast  bool
}

var _ BatchSampler = (*FixedBatchSampler)(nil)

// NewBatchSampler returns a FixedBatchSampler over s. batchSize must be
// positive.
func NewBatchSampler(s Sampler, batchSize int, dropLast bool) (*FixedBatchSampler, error) {
	if s == nil {
		return nil, fmt.Errorf("data: batch sampler: nil sampler")
	}
	if batchSize < 1 {
		return nil, fmt.Errorf("data: batch sampler: batch size %d, want ≥ 1", batchSize)
	}
	return &FixedBatchSampler{sampler: s, batchSize: batchSize, dropLast: dropLast}, nil
}

// BatchSize returns the size of every batch but possibly the last.
func (b *FixedBatchSampler) BatchSize() int { return b.batchSize }

// NumBatches returns ⌊n/B⌋ with DropLast, else ⌈n/B⌉, for n = sampler Len.
func (b *FixedBatchSampler) NumBatches() int {
	return numChunks(b.sampler.Len(), b.batchSize, b.dropLast)
}

// Batches returns the batches of epoch. They are views into one slice.
func (b *FixedBatchSampler) Batches(epoch int) [][]int {
	return Chunk(b.sampler.Indices(epoch), b.batchSize, b.dropLast)
}

// Chunk cuts idx into consecutive batches of size (the last one shorter,
// or dropped when dropLast). The batches alias idx. size must be positive.
func Chunk(idx []int, size int, dropLast bool) [][]int {
	out := make([][]int, 0, numChunks(len(idx), size, dropLast))
	for len(idx) > 0 {
		if len(idx) < size && dropLast {
			break
		}
		k := min(size, len(idx))
		out = append(out, idx[:k:k])
		idx = idx[k:]
	}
	return out
}

func numChunks(n, size int, dropLast bool) int {
	if dropLast {
		return n / size
	}
	return (n + size - 1) / size
}

func identity(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// padOrCut extends idx to total by repeating it from the head (as often as
// needed), or cuts it to total when it is longer.
func padOrCut(idx []int, total int) []int {
	if len(idx) >= total {
		return idx[:total]
	}
	if len(idx) == 0 {
		return idx
	}
	out := slices.Grow(idx, total-len(idx))
	for len(out) < total {
		out = append(out, out[:min(len(idx), total-len(out))]...)
	}
	return out
}
