package collective

// Direct reduce-scatter: every rank sends chunk j of its input straight to
// rank j and folds the size−1 chunks it receives with its own, in rank
// order — one round, the least latency for small messages. Intermediate
// partials live in scratch memory, so the output may be the caller's own
// chunk of the input.
func reduceScatterDirect(b *builder) {
	c := b.call()
	n, r, count := b.n, b.r, c.Count
	part := func(i int) Region { return Region{In, i * count, count} }
	out := all(Out, count)
	if n == 1 {
		b.copy(out, part(0))
		return
	}
	slots := b.tmp(n * count) // slot j holds rank j's chunk; slot r the partial
	slot := func(j int) Region { return slots.sub(j*count, count) }
	b.exchangeAll(part, slot)
	x := func(j int) Region {
		if j == r {
			return part(r)
		}
		return slot(j)
	}
	acc := x(0)
	for j := 1; j < n; j++ {
		dst := slot(r)
		if j == n-1 {
			dst = out
		}
		b.reduce(dst, acc, x(j))
		acc = dst
	}
	b.avg(out)
}
