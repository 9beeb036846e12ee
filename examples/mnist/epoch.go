package main

import (
	"fmt"

	"github.com/cohortml/cohort/data"
)

// position is where the job is in an epoch, as saved in checkpoints (every
// rank saves the same, since data-parallel ranks step together).
//
// An epoch's samples are dealt in turns. The first turn is the epoch's
// DistributedSampler split over Splits[0].World ranks (shuffled by seed and
// epoch). When the job resumes at another world size, the samples no rank
// had reached are dealt again by a ListSampler over the new world: the
// next turn. In every turn each rank has consumed Consumed samples of its
// share. So every sample of the epoch is used exactly once, apart from the
// padding a split adds to make the shares equal (as PyTorch's
// DistributedSampler does).
type position struct {
	Epoch  int     `json:"epoch"`
	Splits []split `json:"splits"`
}

// split is one turn of an epoch: its world size and the samples each rank
// has consumed of its share.
type split struct {
	World    int `json:"world"`
	Consumed int `json:"consumed"`
}

// startOf returns the position at the start of epoch at world size world.
func startOf(epoch, world int) position {
	return position{Epoch: epoch, Splits: []split{{World: world}}}
}

// share returns rank's share of the current (last) turn of p's epoch,
// from the turn's start, for a training set of n samples shuffled with
// seed.
func (p position) share(n int, seed uint64, rank int) ([]int, error) {
	if len(p.Splits) == 0 {
		return nil, fmt.Errorf("data position %+v: no split", p)
	}
	last := p.Splits[len(p.Splits)-1]
	if len(p.Splits) == 1 {
		s, err := data.NewDistributedSampler(n, last.World, rank, true, seed, false)
		if err != nil {
			return nil, err
		}
		return s.Indices(p.Epoch), nil
	}
	left, err := p.unseen(n, seed, len(p.Splits)-1)
	if err != nil {
		return nil, err
	}
	ls, err := data.NewListSampler(left, last.World, rank, false)
	if err != nil {
		return nil, err
	}
	return ls.Indices(p.Epoch), nil
}

// unseen returns the samples of p's epoch that no rank reached in the
// first turns turns, in the order they were dealt.
func (p position) unseen(n int, seed uint64, turns int) ([]int, error) {
	first := p.Splits[0]
	s, err := data.NewDistributedSampler(n, first.World, 0, true, seed, false)
	if err != nil {
		return nil, err
	}
	left, err := s.Unseen(p.Epoch, first.Consumed)
	if err != nil {
		return nil, err
	}
	for _, sp := range p.Splits[1:turns] {
		if left, err = unseenOfList(left, sp); err != nil {
			return nil, err
		}
	}
	return left, nil
}

// unseenOfList is DistributedSampler.Unseen for a turn dealt by a
// ListSampler: the entries of list no rank reached after consuming
// sp.Consumed of its share, in list order, each once.
func unseenOfList(list []int, sp split) ([]int, error) {
	seen := map[int]bool{}
	for r := range sp.World {
		ls, err := data.NewListSampler(list, sp.World, r, false)
		if err != nil {
			return nil, err
		}
		idx := ls.Indices(0)
		if sp.Consumed > len(idx) {
			return nil, fmt.Errorf("data position: %d consumed of a share of %d", sp.Consumed, len(idx))
		}
		for _, i := range idx[:sp.Consumed] {
			seen[i] = true
		}
	}
	var out []int
	for _, i := range list {
		if !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	return out, nil
}
