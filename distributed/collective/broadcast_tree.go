package collective

// Binomial-tree broadcast: with ranks renumbered so the root is 0, rank v
// receives from v minus its lowest set bit and then sends to v+2^j for every
// 2^j below that bit, so the data reaches all ranks in ceil(log2(size))
// rounds. Latency-optimal for small messages. The buffer travels in
// segments, each forwarded as soon as it arrives, so a large broadcast is
// pipelined down the tree.
func broadcastTree(b *builder) {
	c := b.call()
	n, count := b.n, c.Count
	v, real := b.fromRoot()
	parent, children := binomialTree(v, n)
	buf := all(Out, count)
	segs := ceilDiv(count, b.seg)
	var tasks []task
	for k := range segs {
		g := segment(buf, b.seg, k)
		t := task{uses: g, rest: func() {
			for _, ch := range children {
				b.send(real(ch), k, g)
			}
		}}
		if parent >= 0 {
			t.dst = g
			t.recv = func() { b.recv(real(parent), k, g) }
		}
		tasks = append(tasks, t)
	}
	pipeline(tasks, b.depth)
}

// binomialTree returns the parent (−1 for the root) and the children, in
// sending order (largest subtree first), of virtual rank v in a binomial
// tree over n ranks rooted at 0.
func binomialTree(v, n int) (parent int, children []int) {
	parent = -1
	mask := 1
	for mask < n {
		if v&mask != 0 {
			parent = v - mask
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < n {
			children = append(children, v+mask)
		}
	}
	return parent, children
}
