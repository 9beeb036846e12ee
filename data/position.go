package data

import "fmt"

// Position is where a data-parallel job is in an epoch, as its checkpoints
// save it (every rank saves the same, since data-parallel ranks step
// together), so that a job resumed at another world size still uses each
// sample once per epoch.
//
// An epoch's samples are dealt in turns. The first turn is the epoch's
// DistributedSampler split over Splits[0].World ranks (shuffled by seed and
// epoch). When the job resumes at another world size, the samples no rank
// had reached are dealt again by a ListSampler over the new world: the
// next turn (Redeal). In every turn each rank has consumed Consumed
// samples of its share. So every sample of the epoch is used exactly once,
// apart from the padding a split adds to make the shares equal (as
// PyTorch's DistributedSampler does).
type Position struct {
	Epoch  int     `json:"epoch"`
	Splits []Split `json:"splits"`
}

// Split is one turn of an epoch: its world size and the samples each rank
// has consumed of its share.
type Split struct {
	World    int `json:"world"`
	Consumed int `json:"consumed"`
}

// StartOf returns the position at the start of epoch at world size world.
func StartOf(epoch, world int) Position {
	return Position{Epoch: epoch, Splits: []Split{{World: world}}}
}

// Share returns rank's share of the current (last) turn of p's epoch,
// from the turn's start, for a training set of n samples shuffled with
// seed.
func (p Position) Share(n int, seed uint64, rank int) ([]int, error) {
	if len(p.Splits) == 0 {
		return nil, fmt.Errorf("data: position %+v: no split", p)
	}
	last := p.Splits[len(p.Splits)-1]
	if len(p.Splits) == 1 {
		s, err := NewDistributedSampler(n, last.World, rank, true, seed, false)
		if err != nil {
			return nil, err
		}
		return s.Indices(p.Epoch), nil
	}
	left, err := p.Unseen(n, seed, len(p.Splits)-1)
	if err != nil {
		return nil, err
	}
	ls, err := NewListSampler(left, last.World, rank, false)
	if err != nil {
		return nil, err
	}
	return ls.Indices(p.Epoch), nil
}

// Unseen returns the samples of p's epoch that no rank reached in the
// first turns turns, in the order they were dealt.
func (p Position) Unseen(n int, seed uint64, turns int) ([]int, error) {
	first := p.Splits[0]
	s, err := NewDistributedSampler(n, first.World, 0, true, seed, false)
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

// Redeal continues p at world size world: when its last turn was dealt
// among another number of ranks, the samples no rank reached become a new
// turn dealt among world. It reports whether it added that turn.
func (p *Position) Redeal(world int) (bool, error) {
	if len(p.Splits) == 0 {
		return false, fmt.Errorf("data: position %+v: no split", *p)
	}
	if p.Splits[len(p.Splits)-1].World == world {
		return false, nil
	}
	p.Splits = append(p.Splits, Split{World: world})
	return true, nil
}

// Advance records that every rank consumed n more samples of its share of
// the last turn, shareLen samples long; at the share's end the position
// moves to the start of the next epoch at the turn's world size.
func (p *Position) Advance(n, shareLen int) {
	last := &p.Splits[len(p.Splits)-1]
	if last.Consumed += n; last.Consumed >= shareLen {
		*p = StartOf(p.Epoch+1, last.World)
	}
}

// unseenOfList is DistributedSampler.Unseen for a turn dealt by a
// ListSampler: the entries of list no rank reached after consuming
// sp.Consumed of its share, in list order, each once.
func unseenOfList(list []int, sp Split) ([]int, error) {
	seen := map[int]bool{}
	for r := range sp.World {
		ls, err := NewListSampler(list, sp.World, r, false)
		if err != nil {
			return nil, err
		}
		idx := ls.Indices(0)
		if sp.Consumed > len(idx) {
			return nil, fmt.Errorf("data: position: %d consumed of a share of %d", sp.Consumed, len(idx))
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

// Resume continues p, read from a checkpoint of a job of epochs epochs
// over n samples shuffled with seed, at world size world: unless the job
// had ended, the samples of p's epoch that no rank reached are dealt
// again when the world size changed (Redeal). It returns the number of
// batches of batch samples (the last one of a share may be short) rank
// has left to the job's end, the rest of its share of p's epoch and then
// a DistributedSampler share each later epoch, and whether the samples
// were dealt again.
func (p *Position) Resume(world, epochs, n int, seed uint64, rank, batch int) (steps int, resized bool, err error) {
	if p.Epoch >= epochs {
		return 0, false, nil
	}
	if resized, err = p.Redeal(world); err != nil {
		return 0, false, err
	}
	share, err := p.Share(n, seed, rank)
	if err != nil {
		return 0, false, err
	}
	s, err := NewDistributedSampler(n, world, rank, true, seed, false)
	if err != nil {
		return 0, false, err
	}
	batches := func(samples int) int { return (samples + batch - 1) / batch }
	rest := max(len(share)-p.Splits[len(p.Splits)-1].Consumed, 0)
	return batches(rest) + (epochs-p.Epoch-1)*batches(s.Len()), resized, nil
}
