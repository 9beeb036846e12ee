package data

import (
	"fmt"
	"iter"
)

// Strategy selects how a distributed sampler partitions the samples among
// ranks.
type Strategy int

const (
	// Random is PyTorch's DistributedSampler: one permutation of all
	// samples per epoch (identical on every rank), padded from its head to
	// a multiple of the world size, and rank r takes positions r, r+W, ….
	Random Strategy = iota
	// Contiguous gives each rank one contiguous block of the (padded)
	// index range, the same block every epoch: good locality for sharded or
	// memory-mapped files. With shuffle the order inside the block changes
	// per epoch.
	Contiguous
	// Bucket groups samples of similar length into batches to cut padding
	// (see BucketSampler); it is a batch-level strategy.
	Bucket
)

func (s Strategy) String() string {
	switch s {
	case Random:
		return "random"
	case Contiguous:
		return "contiguous"
	case Bucket:
		return "bucket"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// ParseStrategy maps "random", "contiguous" (or "sequential") and "bucket"
// to a Strategy.
func ParseStrategy(name string) (Strategy, error) {
	switch name {
	case "random", "":
		return Random, nil
	case "contiguous", "sequential":
		return Contiguous, nil
	case "bucket", "bucketing":
		return Bucket, nil
	}
	return 0, fmt.Errorf("data: unknown partitioning strategy %q (want random, contiguous or bucket)", name)
}

// DistributedSampler restricts each rank to its own share of a dataset.
//
// With the Random strategy it is index-for-index identical to PyTorch's
// torch.utils.data.distributed.DistributedSampler(dataset, num_replicas,
// rank, shuffle, seed, drop_last) after set_epoch(epoch):
//
//	numSamples = ⌈(length−W)/W⌉ if dropLast and W ∤ length, else ⌈length/W⌉
//	totalSize  = numSamples·W
//	idx        = Randperm(length, seed+epoch) if shuffle, else 0..length−1
//	idx        = idx padded from its head to totalSize (repeated as often as
//	             needed), or cut to totalSize with dropLast
//	rank r     = idx[r], idx[r+W], idx[r+2W], …
//
// So across ranks every index appears exactly once per epoch, except that
// without dropLast totalSize−length indices from the head of idx appear
// twice, and with dropLast length−totalSize indices from its tail are left
// out. The Contiguous strategy makes the same padding or cut and gives rank
// r the block idx[r·numSamples : (r+1)·numSamples] of the unshuffled range.
//
// The configuration is immutable; only the epoch set by SetEpoch changes.
// Indices(epoch) is a pure function. A DistributedSampler is not safe for
// concurrent SetEpoch.
type DistributedSampler struct {
	length, numReplicas, rank int
	shuffle                   bool
	seed                      uint64
	dropLast                  bool
	strategy                  Strategy
	epoch                     int
}

var _ Sampler = (*DistributedSampler)(nil)

// NewDistributedSampler returns PyTorch's DistributedSampler (the Random
// strategy). It fails when numReplicas < 1, rank is outside
// [0, numReplicas) or length < 0.
func NewDistributedSampler(length, numReplicas, rank int, shuffle bool, seed uint64, dropLast bool) (*DistributedSampler, error) {
	return newDistributed(Random, length, numReplicas, rank, shuffle, seed, dropLast)
}

// NewContiguousSampler returns a DistributedSampler with the Contiguous
// strategy: rank r owns one block of consecutive indices; shuffle permutes
// the order within the block every epoch (with Randperm seeded seed+epoch).
func NewContiguousSampler(length, numReplicas, rank int, shuffle bool, seed uint64, dropLast bool) (*DistributedSampler, error) {
	return newDistributed(Contiguous, length, numReplicas, rank, shuffle, seed, dropLast)
}

func newDistributed(st Strategy, length, numReplicas, rank int, shuffle bool, seed uint64, dropLast bool) (*DistributedSampler, error) {
	if err := checkWorld(length, numReplicas, rank); err != nil {
		return nil, err
	}
	return &DistributedSampler{length: length, numReplicas: numReplicas, rank: rank,
		shuffle: shuffle, seed: seed, dropLast: dropLast, strategy: st}, nil
}

func checkWorld(length, numReplicas, rank int) error {
	switch {
	case numReplicas < 1:
		return fmt.Errorf("data: distributed sampler: numReplicas %d, want ≥ 1", numReplicas)
	case rank < 0 || rank >= numReplicas:
		return fmt.Errorf("data: distributed sampler: rank %d out of range [0, %d) for numReplicas %d", rank, numReplicas, numReplicas)
	case length < 0:
		return fmt.Errorf("data: distributed sampler: length %d, want ≥ 0", length)
	}
	return nil
}

// Strategy returns the partitioning strategy.
func (s *DistributedSampler) Strategy() Strategy { return s.strategy }

// SetEpoch sets the epoch used by All (PyTorch's set_epoch).
func (s *DistributedSampler) SetEpoch(epoch int) { s.epoch = epoch }

// Epoch returns the epoch set by SetEpoch.
func (s *DistributedSampler) Epoch() int { return s.epoch }

// Len returns numSamples, the number of indices this rank gets per epoch.
func (s *DistributedSampler) Len() int {
	return distNumSamples(s.length, s.numReplicas, s.dropLast)
}

// TotalSize returns numSamples·numReplicas.
func (s *DistributedSampler) TotalSize() int { return s.Len() * s.numReplicas }

// NumReplicas returns the world size the sampler splits for.
func (s *DistributedSampler) NumReplicas() int { return s.numReplicas }

// Rank returns this sampler's rank.
func (s *DistributedSampler) Rank() int { return s.rank }

func distNumSamples(length, w int, dropLast bool) int {
	if dropLast && length%w != 0 {
		// ⌈(length−w)/w⌉, which is 0 when length < w (Python's ceil of a
		// negative fraction above −1).
		return (length - 1) / w
	}
	return (length + w - 1) / w
}

// Global returns the padded (or cut) index list of epoch that all ranks
// split: totalSize entries.
func (s *DistributedSampler) Global(epoch int) []int {
	var idx []int
	if s.shuffle && s.strategy == Random {
		idx = Randperm(s.length, s.seed+uint64(epoch))
	} else {
		idx = identity(s.length)
	}
	return padOrCut(idx, s.TotalSize())
}

// Indices returns this rank's indices for epoch.
func (s *DistributedSampler) Indices(epoch int) []int {
	return s.rankIndices(s.Global(epoch), s.rank, epoch)
}

// rankIndices returns rank's share of the global list g of epoch.
func (s *DistributedSampler) rankIndices(g []int, rank, epoch int) []int {
	n := s.Len()
	out := make([]int, 0, n)
	if s.strategy == Contiguous {
		out = append(out, g[rank*n:(rank+1)*n]...)
		if s.shuffle {
			permute(out, NewMT19937(s.seed+uint64(epoch)))
		}
		return out
	}
	for i := rank; i < len(g); i += s.numReplicas {
		out = append(out, g[i])
	}
	return out
}

// All iterates this rank's indices for the epoch set by SetEpoch.
func (s *DistributedSampler) All() iter.Seq[int] {
	idx := s.Indices(s.epoch)
	return func(yield func(int) bool) {
		for _, i := range idx {
			if !yield(i) {
				return
			}
		}
	}
}
