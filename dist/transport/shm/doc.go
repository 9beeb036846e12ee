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
// Waiting is a bounded spin, then a futex sleep on a word in shared memory
// that the other side wakes (FUTEX_WAIT/FUTEX_WAKE, shared, not private);
// sleeps also time out so flags are re-checked. A 4 KiB round trip stays
// in the spin phase when both ranks are busy; Options.Spin trades CPU for
// latency.
//
// Setup mirrors package tcp: Listen creates the segment and a Unix-domain
// socket beside it, the caller publishes Listener.Addr (the segment's
// path), and Connect maps every peer's segment and connects the sockets,
// higher rank dialling lower, with the same mutual HMAC handshake as tcp
// when Options.Token is set. Once every peer has mapped a segment its file
// is unlinked, so nothing is left in the directory even if processes are
// killed later (a process killed during setup can leave its two files,
// named Options.Prefix-*).
//
// The sockets stay open as a liveness channel: the kernel closes them when
// a process dies, so pending and later calls involving a dead rank fail
// with a *transport.PeerError within milliseconds. Close says goodbye over
// them; messages already in the rings stay receivable by the peers.
package shm
