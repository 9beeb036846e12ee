// Package distributed is cohort's distributed API: a ProcessGroup of ranks that run
// collectives (all-reduce, broadcast, reduce, all-gather, reduce-scatter,
// all-to-all, gather, scatter, send/recv, barrier) asynchronously, each
// returning a Work handle.
//
// Ops on one group run in the order they were issued, on a goroutine the
// group owns; several may be in flight. Every op carries a fingerprint
// (kind, dtype, count, root, seq) that peers check, so ranks that call
// different collectives get an error naming both ranks and both calls
// instead of a hang. A failed or timed-out op aborts the group: pending and
// later ops fail with an error wrapping ErrAborted that names the op, its
// sequence number and the peer, and the other ranks are told so they fail
// fast too.
//
// Init builds a group from a store (addresses are exchanged through it);
// InitFromEnv reads the launcher's environment (torchrun, Slurm, OpenMPI,
// Kubernetes) through package rendezvous. The transports (tcp, shm, inproc),
// the store and the collective algorithms live in sub-packages; this package
// joins them and imports nothing above it.
package distributed
