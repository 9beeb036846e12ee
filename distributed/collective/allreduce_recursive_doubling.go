package collective

// Recursive-doubling all-reduce: in round i every rank exchanges its whole
// partial result with the rank whose (virtual) number differs in bit i and
// combines the two, so log2(size) rounds leave the full reduction
// everywhere. Latency-optimal: it is the choice for small messages, where
// per-message cost dominates. A group that is not a power of two, p ≤ size
// < 2p, first folds: of the first 2·(size−p) ranks each even one hands its
// buffer to the odd one above it and sits out, receiving the result at the
// end (Thakur, Rabenseifner and Gropp, "Optimization of collective
// communication operations in MPICH", IJHPCA 2005). Partners combine
// operands in the same order (lower virtual rank first), so every rank ends
// with bitwise-identical values.
func allReduceRecursiveDoubling(b *builder) {
	buf, in, v, ok := foldedStart(b)
	if !ok {
		return
	}
	n, r := b.n, b.r
	p := floorPow2(n)
	round := 1
	for mask := 1; mask < p; mask <<= 1 {
		pv := v ^ mask
		peer := unfoldRank(pv, n-p)
		b.send(peer, round, buf)
		b.recv(peer, round, in)
		reduceInOrder(b, buf, in, pv < v)
		round++
	}
	b.avg(buf)
	foldOut(b, buf, r, n-p)
}

// foldedStart begins the plan of an all-reduce that folds a group to a
// power of two (foldIn): the whole output is the buffer, in a scratch
// region of its size. ok is false where the plan is already complete: a
// group of one, or a rank that sits out.
func foldedStart(b *builder) (buf, in Region, v int, ok bool) {
	if b.n == 1 {
		return Region{}, Region{}, 0, false
	}
	count := b.call().Count
	buf, in = all(Out, count), b.tmp(count)
	v, ok = foldIn(b, buf, in)
	return buf, in, v, ok
}

// reduceInOrder reduces got, a partner's partial result, into mine, the
// operand of the lower virtual rank first (got's if theirsFirst), so
// that both partners compute bitwise-identical values.
func reduceInOrder(b *builder, mine, got Region, theirsFirst bool) {
	if theirsFirst {
		b.reduce(mine, got, mine)
	} else {
		b.reduce(mine, mine, got)
	}
}

// foldIn reduces a group of size n to p = floorPow2(n) virtual ranks: each
// even rank below 2·(n−p) sends buf (message 0) to the odd rank above it
// and waits for the result (message final, see foldOut). It returns the
// caller's virtual rank, or ok false if the rank sits out (its plan is then
// complete up to the final receive, which foldIn has already appended).
func foldIn(b *builder, buf, in Region) (v int, ok bool) {
	n, r := b.n, b.r
	rem := n - floorPow2(n)
	switch {
	case r >= 2*rem:
		return r - rem, true
	case r%2 == 0:
		b.send(r+1, 0, buf)
		b.recv(r+1, foldFinalMsg, buf)
		return 0, false
	default:
		b.recv(r-1, 0, in)
		b.reduce(buf, in, buf)
		return r / 2, true
	}
}

// foldFinalMsg numbers the message that returns the result to a rank that
// sat out; it is above any round number a plan uses.
const foldFinalMsg = 1 << 30

// foldOut sends the result back to the rank that sat out, if any.
func foldOut(b *builder, buf Region, r, rem int) {
	if r < 2*rem && r%2 == 1 {
		b.send(r-1, foldFinalMsg, buf)
	}
}

// unfoldRank maps virtual rank v back to a real rank when rem ranks sat out.
func unfoldRank(v, rem int) int {
	if v < rem {
		return 2*v + 1
	}
	return v + rem
}
