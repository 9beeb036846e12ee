package collective

// Direct all-gather: every rank sends its input to every other rank at
// once and receives theirs straight into the output — one round, the least
// latency for small messages. Rank r sends to r+1, r+2, … in turn so that
// no rank is everybody's first destination.
func allGatherDirect(b *builder) {
	c := b.call()
	r, count := b.r, c.Count
	src := all(In, count)
	b.copy(Region{Out, r * count, count}, src)
	b.exchangeAll(func(int) Region { return src }, func(from int) Region { return Region{Out, from * count, count} })
}
