package collective

// Direct scatter: the root sends chunk j of its input to rank j, all at
// once, and copies its own chunk; every other rank receives one message.
func scatterDirect(b *builder) {
	c := b.call()
	n, r, count := b.n, b.r, c.Count
	dst := all(Out, count)
	if r != c.Root {
		b.recv(c.Root, 0, dst)
		return
	}
	for k := 1; k < n; k++ {
		to := mod(r+k, n)
		b.send(to, 0, Region{In, to * count, count})
	}
	b.copy(dst, Region{In, r * count, count})
}
