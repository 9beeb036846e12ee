package data

import "fmt"

// Unseen returns the indices of epoch that no rank has reached when every
// one of the sampler's numReplicas ranks has consumed the first consumed
// indices of its share — the samples left for the epoch when a job
// restarts with another world size. They come in the order of the epoch's
// global list, each once: padding repeats of already-seen samples are not
// returned, and with dropLast the indices cut from the epoch stay cut.
//
// With a Loader over NewBatchSampler(s, B, ·), consumed is
// min(State.Position·B, Len()) of the saved state (every rank is at the
// same step of a data-parallel job).
//
// Split them among the new ranks with NewListSampler; together with the
// consumed indices every sample of the epoch is then seen exactly once (up
// to the new split's own padding).
func (s *DistributedSampler) Unseen(epoch, consumed int) ([]int, error) {
	n := s.Len()
	if consumed < 0 || consumed > n {
		return nil, fmt.Errorf("data: unseen: %d consumed of the %d indices per rank", consumed, n)
	}
	g := s.Global(epoch)
	seen := make([]bool, s.length)
	for r := range s.numReplicas {
		for _, i := range s.rankIndices(g, r, epoch)[:consumed] {
			seen[i] = true
		}
	}
	var out []int
	for _, i := range g {
		if !seen[i] {
			seen[i] = true // once, even if padding repeats it
			out = append(out, i)
		}
	}
	return out, nil
}

// ListSampler splits a fixed list of indices among ranks the way
// DistributedSampler splits its global list: padded from its head (or cut,
// with dropLast) to a multiple of numReplicas, rank r taking positions r,
// r+W, …. The list is the same every epoch; shuffle it beforehand if
// needed.
//
// It is immutable and safe for concurrent use.
type ListSampler struct {
	list              []int
	numReplicas, rank int
	dropLast          bool
}

var _ Sampler = (*ListSampler)(nil)

// NewListSampler returns rank's share of list (which it copies).
func NewListSampler(list []int, numReplicas, rank int, dropLast bool) (*ListSampler, error) {
	if err := checkWorld(len(list), numReplicas, rank); err != nil {
		return nil, err
	}
	return &ListSampler{list: append([]int(nil), list...), numReplicas: numReplicas, rank: rank, dropLast: dropLast}, nil
}

// Len returns the number of indices the rank gets.
func (l *ListSampler) Len() int { return distNumSamples(len(l.list), l.numReplicas, l.dropLast) }

// Indices returns the rank's indices (the same for every epoch).
func (l *ListSampler) Indices(int) []int {
	g := padOrCut(append([]int(nil), l.list...), l.Len()*l.numReplicas)
	out := make([]int, 0, l.Len())
	for i := l.rank; i < len(g); i += l.numReplicas {
		out = append(out, g[i])
	}
	return out
}
