// Package shm is a transport through shared memory, for ranks on one
// host.
//
// Each rank owns a segment, a file in a tmpfs directory (/dev/shm by
// default) that every peer maps: one single-producer single-consumer ring
// per sending peer, plus a doorbell. A sender copies a message into its
// ring of the receiver's segment; the receiver's progress goroutine copies
// it out, straight into the buffer of a Recv already waiting for the tag,
// or into memory queued for a later Recv. Send thus never waits for the
// matching Recv, only (briefly) for ring space.
//
// A receiver first polls the rings itself for up to Options.Spin, so a
// message arriving meanwhile reaches it without waking any thread; then it
// blocks, and the rank's progress goroutine, which sleeps on a futex word
// in shared memory (FUTEX_WAIT/FUTEX_WAKE, shared, not private) whenever
// the rings are empty, delivers. Senders ring that doorbell only when the
// progress goroutine sleeps and no receiver polls. A sender that finds a
// ring full spins, then sleeps on a futex word the receiver wakes. Every
// futex sleep also times out, as a backstop, so flags are re-checked.
//
// Setup mirrors package tcp: Listen creates the segment and a Unix-domain
// socket beside it, the caller publishes Listener.Addr (the segment's
// path), and Connect maps every peer's segment and connects the sockets,
// higher rank dialling lower, with the same mutual HMAC handshake as tcp
// when Options.Token is set. The peers are every other rank of the world,
// or those of Options.Peers: the ranks of a job on one host of several
// share memory among themselves, keep their ranks in the world, and reach
// the other hosts through another transport (package route combines
// them). A segment holds a ring for each peer only. Once every peer has mapped a segment its file
// is unlinked, so nothing is left in the directory even if processes are
// killed later. A process killed during setup can leave its two files
// (Options.Prefix-pid-rank-id and its socket); the next Listen with the
// same prefix and directory removes those whose pid no longer exists.
//
// The sockets stay open as a liveness channel: the kernel closes them when
// a process dies, so pending and later calls involving a dead rank fail
// with a *transport.PeerError within milliseconds. Close says goodbye over
// them; messages already in the rings stay receivable by the peers.
package shm
