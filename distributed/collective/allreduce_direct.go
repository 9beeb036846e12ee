package collective

// Direct all-reduce: every rank sends its whole buffer to every other rank
// at once and folds the size−1 buffers it receives with its own, in rank
// order. One round instead of recursive doubling's log2(size), at the cost
// of size−1 messages per rank: it suits small messages on groups where a
// round is expensive, such as more ranks than cores (each round then waits
// for ranks to be scheduled). Every rank folds the same operands in the same
// order, so results are bitwise identical.
func allReduceDirect(b *builder) {
	c := b.call()
	n, r, count := b.n, b.r, c.Count
	if n == 1 {
		return
	}
	buf := all(Out, count)
	slots := b.tmp(n * count) // slot j holds rank j's buffer; slot r the partial
	slot := func(j int) Region { return slots.sub(j*count, count) }
	b.exchangeAll(func(int) Region { return buf }, slot)
	// Keep this rank's contribution before the output is overwritten.
	b.copy(slot(r), buf)
	b.reduce(buf, slot(0), slot(1))
	for j := 2; j < n; j++ {
		b.reduce(buf, buf, slot(j))
	}
	b.avg(buf)
}
