package collective

// Pairwise all-to-all: rank r sends chunk r+k of its input to rank r+k and
// receives rank r−k's chunk for it, for k = 1…size−1, all at once; its own
// chunk is a local copy. Staggering the destinations spreads the load so
// no rank is everybody's first peer.
func allToAllPairwise(b *builder) {
	c := b.call()
	r, count := b.r, c.Count
	in := func(i int) Region { return Region{In, i * count, count} }
	out := func(i int) Region { return Region{Out, i * count, count} }
	b.copy(out(r), in(r))
	b.exchangeAll(in, out)
}
