package collective

// Ring all-reduce: a reduce-scatter followed by an all-gather around the
// ring r → r+1, each in size−1 steps. The buffer is cut into size chunks;
// in reduce-scatter step s rank r sends its partial of chunk r−s to its
// right neighbour and folds the partial of chunk r−s−1 arriving from its
// left one into its own, so after size−1 steps it holds the full reduction
// of chunk r+1. The all-gather then passes the finished chunks once around.
// Every rank sends and receives 2·(size−1)/size of the buffer, which is
// bandwidth-optimal (Patarasuk and Yuan, "Bandwidth optimal all-reduce
// algorithms for clusters of workstations", JPDC 2009). Chunks travel in
// segments so that receiving segment k+1 overlaps with reducing and
// forwarding segment k. Each chunk is reduced on one rank and then copied,
// so every rank ends with bitwise-identical values.
func allReduceRing(b *builder) {
	c := b.call()
	n, r, count := b.n, b.r, c.Count
	if n == 1 {
		return
	}
	right, left := mod(r+1, n), mod(r-1, n)
	maxChunk := ceilDiv(count, n)
	segs := ceilDiv(maxChunk, b.seg)
	slotLen := min(b.seg, maxChunk)
	slots := b.tmp((b.depth + 1) * slotLen)
	msg := func(step, k int) int { return step*segs + k }
	part := func(i int) Region { return chunk(Out, count, n, mod(i, n)) }

	first := b.ringFirst(right, segs, part(r))
	var tasks []task
	slot := 0
	// Reduce-scatter: step s receives chunk r−s−1 and forwards it reduced.
	for s := range n - 1 {
		for k := range segs {
			g := segment(part(r-s-1), b.seg, k)
			if g.Len == 0 {
				continue
			}
			in := slots.sub((slot%(b.depth+1))*slotLen, g.Len)
			slot++
			last := s == n-2
			tasks = append(tasks, b.ringTask(left, msg(s, k), k, in, g, func() {
				b.reduce(g, in, g)
				if last {
					b.avg(g)
				}
				b.send(right, msg(s+1, k), g) // step n−1 is all-gather step 0
			}))
		}
	}
	// All-gather: step s receives finished chunk r−s and passes it on.
	for s := range n - 1 {
		for k := range segs {
			g := segment(part(r-s), b.seg, k)
			if g.Len == 0 {
				continue
			}
			tasks = append(tasks, b.ringTask(left, msg(n-1+s, k), k, g, g, func() {
				if s < n-2 {
					b.send(right, msg(n+s, k), g)
				}
			}))
		}
	}
	emitSegmented(b, first, tasks)
}
