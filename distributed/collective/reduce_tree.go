package collective

// Binomial-tree reduce: the mirror image of the tree broadcast. With ranks
// renumbered so the root is 0, rank v receives and folds in the partials
// of v+2^j for each 2^j below its lowest set bit, then sends its partial to
// v minus that bit; the root ends with the reduction after
// ceil(log2(size)) rounds. Latency-optimal for small messages. Ranks other
// than the root accumulate in scratch memory, leaving their buffer intact.
func reduceTree(b *builder) {
	c := b.call()
	n, count := b.n, c.Count
	v, real := b.fromRoot()
	buf := all(Out, count)
	_, children := binomialTree(v, n)
	var in Region
	acc := buf
	if len(children) > 0 {
		in = b.tmp(count)
		if v != 0 {
			acc = b.tmp(count)
		}
	}
	cur := buf
	// Children in order of increasing subtree: the nearest first.
	for i := len(children) - 1; i >= 0; i-- {
		b.recv(real(children[i]), 0, in)
		b.reduce(acc, cur, in)
		cur = acc
	}
	if v == 0 {
		b.avg(buf)
		return
	}
	parent, _ := binomialTree(v, n)
	b.send(real(parent), 0, cur)
}
