package collective

// Recursive halving-doubling all-reduce (Rabenseifner's algorithm): a
// reduce-scatter by recursive halving — in each of log2(p) rounds a rank
// keeps half of its current range, sends the other half to its partner and
// folds the partner's copy of the kept half into its own — followed by an
// all-gather by recursive doubling that retraces the rounds. It needs
// 2·log2(p) rounds (against the ring's 2·(size−1)) while each rank still
// moves only about twice the buffer, so it wins for medium messages on
// groups larger than two. Groups that are not a power of two fold first,
// as in recursive doubling (Thakur, Rabenseifner and Gropp, IJHPCA 2005).
// Each block is reduced on one rank and then copied, so every rank ends with
// bitwise-identical values.
func allReduceHalvingDoubling(b *builder) {
	buf, in, v, ok := foldedStart(b)
	if !ok {
		return
	}
	n, r, count := b.n, b.r, b.call().Count
	p := floorPow2(n)
	blocks := func(lo, hi int) Region { // blocks [lo, hi) of p
		off, _ := split(count, p, lo)
		end, _ := split(count, p, hi)
		return Region{Out, off, end - off}
	}
	round := 1
	lo, hi := 0, p
	for mask := p / 2; mask >= 1; mask /= 2 {
		pv := v ^ mask
		peer := unfoldRank(pv, n-p)
		mid := lo + (hi-lo)/2
		keep, give := blocks(lo, mid), blocks(mid, hi)
		if v&mask != 0 {
			keep, give = give, keep
			lo = mid
		} else {
			hi = mid
		}
		got := in.sub(0, keep.Len)
		b.send(peer, round, give)
		b.recv(peer, round, got)
		reduceInOrder(b, keep, got, pv < v)
		round++
	}
	b.avg(blocks(v, v+1))
	for mask := 1; mask < p; mask *= 2 {
		pv := v ^ mask
		peer := unfoldRank(pv, n-p)
		mine := v &^ (mask - 1)
		theirs := pv &^ (mask - 1)
		b.send(peer, round, blocks(mine, mine+mask))
		b.recv(peer, round, blocks(theirs, theirs+mask))
		round++
	}
	foldOut(b, buf, r, n-p)
}
