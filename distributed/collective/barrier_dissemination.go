package collective

// Dissemination barrier: in round i rank r signals rank r+2^i and waits for
// the signal of rank r−2^i, so after ceil(log2(size)) rounds every rank has
// heard, directly or through others, from every rank (Hensgen, Finkel and
// Manber, "Two algorithms for barrier synchronization", IJPP 1988). The
// signal is one scratch element that each round receives and the next
// sends, which orders the rounds.
func barrierDissemination(b *builder) {
	n, r := b.n, b.r
	if n == 1 {
		return
	}
	token := b.tmp(1)
	round := 0
	for d := 1; d < n; d <<= 1 {
		b.send(mod(r+d, n), round, token)
		b.recv(mod(r-d, n), round, token)
		round++
	}
}
