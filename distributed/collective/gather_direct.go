package collective

// Direct gather: every rank sends its input to the root, which receives
// each straight into its chunk of the output (and copies its own). The root
// receives size−1 messages concurrently.
func gatherDirect(b *builder) {
	c := b.call()
	n, r, count := b.n, b.r, c.Count
	src := all(In, count)
	if r != c.Root {
		b.send(c.Root, 0, src)
		return
	}
	b.copy(Region{Out, r * count, count}, src)
	for k := 1; k < n; k++ {
		from := mod(r+k, n)
		b.recv(from, 0, Region{Out, from * count, count})
	}
}
