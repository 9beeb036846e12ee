package collective

// Point-to-point send and receive: one message between the two ranks.
// Package distributed numbers each pair's point-to-point ops separately from the
// group's collectives, so ranks that take no part never see them.
func sendDirect(b *builder) {
	c := b.call()
	b.send(c.Peer, 0, all(Out, c.Count))
}

func recvDirect(b *builder) {
	c := b.call()
	b.recv(c.Peer, 0, all(Out, c.Count))
}
