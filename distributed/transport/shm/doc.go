// Package shm is a transport through shared memory, for ranks on one
// host.
//
// Each rank owns a segment, a file in a tmpfs directory (/dev/shm by
// default) that every peer maps: one single-producer single-consumer ring
// per sending peer, plus a doorbell. Setup maps every page of the rings
// (MADV_POPULATE_WRITE) and reads it through each mapping, so no message
// pays a page fault, nor a hypervisor's first-access cost (see prefault). A sender copies
// a message into its ring of the receiver's segment. Send thus never waits
// for the matching Recv, only (briefly) for ring space.
//
// A receiver takes its message itself, on its own goroutine: it watches
// the ring's head word and copies the message straight out of the ring
// into its buffer as the bytes are published, with no hand-off to another
// goroutine, no system call and no allocation; or, through RecvFold
// (transport.Folder), hands those bytes to the caller's reduction where
// they lie in the ring, so that a reduced message is never copied out.
// Records for other tags it
// meets on the way go to a per-peer queue (package demux) where their
// receivers find them. How it waits is chosen from what waiting costs on
// the machine, measured, not assumed (wait.go; Transport.Wait reports the
// plan and its figures, COHORT_SHM_WAIT_LOG=1 prints them): every futex
// wake-up a sender causes is timed (the sender stamps the ring with the
// monotonic clock as it rings), a sched_yield is timed once per process,
// and the ranks sharing memory are counted against their CPUs. It first
// polls, for a multiple of the observed wake-up (Options.Spin overrides),
// yielding to the Go scheduler now and then; with more ranks than CPUs it
// also yields the CPU between polls (sched_yield), and sleeps at once
// when yields take whole time slices, a sign of outside load: the fastest
// one timed at Listen, or a recent one (see yield.go). Then it sleeps on a futex word of the ring
// (FUTEX_WAIT, shared, not private), which senders ring once per sleep,
// and only while someone sleeps there; its first sleeps of a wait, up to
// a few wake-ups' worth, through a raw system call that keeps the
// thread's P, sparing the Go runtime's P hand-off and the 20 µs sysmon
// ticks that follow one. COHORT_SHM_WAKE_DELAY=20us adds that much to
// every woken sleep, so that a machine with fast wake-ups reproduces a
// slow-waking one (and the plan adapts to it). A receive that finds a message for
// its tag already queued, or waits long (directWait), posts itself to the
// queue instead, and the rank's progress goroutine, asleep on the segment's
// doorbell futex, delivers: senders ring the doorbell only for the tags
// such receivers wait for (a counter per tag hash in the ring's header),
// or when a ring is full. Once awake it moves records out of a ring only
// as far as it must (up to the last one such a receiver waits for, or all
// of them when the ring is full or the peer has gone); the rest wait in
// the ring for their own receivers. Receives for the process group's abort
// notices (Seq ^0), posted for the group's lifetime, always wait in the
// queue. A sender that finds a ring full spins, then
// sleeps on a futex word the receiver wakes. Every futex sleep also times
// out, as a backstop, so flags are re-checked.
//
// Messages of Options.RendezvousBytes or more go by single copy when the
// receiver can read the sender's memory (process_vm_readv, tried at
// setup): the ring carries a descriptor, the waiting receiver copies the
// bytes straight from the sender's buffer into its own, and Send returns
// once it has; if no receiver claims the descriptor within a few
// milliseconds the sender withdraws it and sends the bytes through the
// ring (see single_copy_linux.go).
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
