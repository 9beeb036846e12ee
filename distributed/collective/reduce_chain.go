package collective

// Pipelined chain reduce: ranks (renumbered so the root is 0) form a chain
// size−1 → … → 1 → 0 and partial results flow down it in segments. Rank v
// receives segment k of the partial of ranks v+1…size−1, folds its own
// segment in and forwards the result, receiving segment k+1 meanwhile.
// Every link carries the buffer once, so it suits large messages. Ranks
// other than the root accumulate in scratch memory, leaving their buffer
// intact.
func reduceChain(b *builder) {
	c := b.call()
	n, count := b.n, c.Count
	if n == 1 {
		b.avg(all(Out, count))
		return
	}
	v, real := b.fromRoot()
	buf := all(Out, count)
	segs := ceilDiv(count, b.seg)
	slotLen := min(b.seg, count)
	var in, acc Region
	if v < n-1 {
		in = b.tmp((b.depth + 1) * slotLen)
		if v > 0 {
			acc = b.tmp((b.depth + 1) * slotLen)
		}
	}
	var tasks []task
	for k := range segs {
		g := segment(buf, b.seg, k)
		slot := (k % (b.depth + 1)) * slotLen
		t := task{uses: g}
		switch {
		case v == n-1:
			t.rest = func() { b.send(real(v-1), k, g) }
		default:
			got := in.sub(slot, g.Len)
			t.dst = got
			t.recv = func() { b.recv(real(v+1), k, got) }
			t.rest = func() {
				if v == 0 {
					b.reduce(g, g, got)
					b.avg(g)
					return
				}
				a := acc.sub(slot, g.Len)
				b.reduce(a, g, got)
				b.send(real(v-1), k, a)
			}
		}
		tasks = append(tasks, t)
	}
	pipeline(tasks, b.depth)
}
