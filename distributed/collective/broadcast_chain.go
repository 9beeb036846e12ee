package collective

// Pipelined chain broadcast: ranks (renumbered so the root is 0) form a
// chain 0 → 1 → … → size−1 and the buffer flows down it in segments; each
// rank forwards segment k while it receives segment k+1. Every link carries
// the buffer once, so for large messages the time approaches one buffer
// transfer plus size−2 segment transfers of pipeline fill.
func broadcastChain(b *builder) {
	c := b.call()
	n, count := b.n, c.Count
	v, real := b.fromRoot()
	buf := all(Out, count)
	segs := ceilDiv(count, b.seg)
	var tasks []task
	for k := range segs {
		g := segment(buf, b.seg, k)
		t := task{uses: g}
		if v > 0 {
			t.dst = g
			t.recv = func() { b.recv(real(v-1), k, g) }
		}
		if v < n-1 {
			t.rest = func() { b.send(real(v+1), k, g) }
		}
		tasks = append(tasks, t)
	}
	pipeline(tasks, b.depth)
}
