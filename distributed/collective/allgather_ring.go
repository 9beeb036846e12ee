package collective

// Ring all-gather: each rank copies its input into its own chunk of the
// output, then in step s (of size−1) sends chunk r−s to its right neighbour
// and receives chunk r−s−1 from its left one, forwarding it in the next
// step. Every rank sends and receives (size−1)/size of the output, which is
// bandwidth-optimal. Chunks travel in segments, each forwarded as soon as
// it arrives.
func allGatherRing(b *builder) {
	c := b.call()
	n, r, count := b.n, b.r, c.Count
	part := func(i int) Region { return Region{Out, mod(i, n) * count, count} }
	b.copy(part(r), all(In, count))
	if n == 1 {
		return
	}
	right, left := mod(r+1, n), mod(r-1, n)
	segs := ceilDiv(count, b.seg)
	msg := func(step, k int) int { return step*segs + k }
	first := b.ringFirst(right, segs, part(r))
	var tasks []task
	for s := range n - 1 {
		for k := range segs {
			g := segment(part(r-s-1), b.seg, k)
			tasks = append(tasks, b.ringTask(left, msg(s, k), k, g, g, func() {
				if s < n-2 {
					b.send(right, msg(s+1, k), g)
				}
			}))
		}
	}
	emitSegmented(b, first, tasks)
}
