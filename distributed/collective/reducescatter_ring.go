package collective

// Ring reduce-scatter: the first half of the ring all-reduce, arranged so
// that rank r ends with chunk r. In step s (of size−1) rank r sends its
// partial of chunk r−s−1 to its right neighbour and folds the partial of
// chunk r−s−2 arriving from its left one with its own input; the last step
// folds chunk r into the output. Partials live in two scratch chunks
// (alternating), so the input is only read. Every rank sends and receives
// (size−1)/size of the input, which is bandwidth-optimal; chunks travel in
// segments so receiving overlaps with reducing.
func reduceScatterRing(b *builder) {
	c := b.call()
	n, r, count := b.n, b.r, c.Count
	part := func(i int) Region { return Region{In, mod(i, n) * count, count} }
	if n == 1 {
		b.copy(all(Out, count), part(0))
		return
	}
	right, left := mod(r+1, n), mod(r-1, n)
	segs := ceilDiv(count, b.seg)
	slotLen := min(b.seg, count)
	slots := b.tmp((b.depth + 1) * slotLen)
	var acc [2]Region
	if n > 2 {
		acc[0], acc[1] = b.tmp(count), b.tmp(count)
	}
	msg := func(step, k int) int { return step*segs + k }
	first := b.ringFirst(right, segs, part(r-1))
	var tasks []task
	slot := 0
	for s := range n - 1 {
		dst := all(Out, count)
		if s < n-2 {
			dst = acc[s%2]
		}
		for k := range segs {
			own := segment(part(r-s-2), b.seg, k)
			d := segment(dst, b.seg, k)
			in := slots.sub((slot%(b.depth+1))*slotLen, own.Len)
			slot++
			tasks = append(tasks, b.ringTask(left, msg(s, k), k, in, d, func() {
				b.reduce(d, in, own)
				if s < n-2 {
					b.send(right, msg(s+1, k), d)
				} else {
					b.avg(d)
				}
			}))
		}
	}
	emitSegmented(b, first, tasks)
}
