// Package distributed is cohort's distributed API: a ProcessGroup of ranks
// that run collectives (all-reduce, broadcast, reduce, all-gather,
// reduce-scatter, all-to-all, gather, scatter, send/recv, barrier)
// asynchronously, each returning a Work handle; subgroups (NewGroup) and
// meshes of them (Mesh); the options, errors and buffers every backend
// shares.
//
// Ops on one group run in the order they were issued; several may be in
// flight. A failed or timed-out op aborts the group: pending and later ops
// fail with an error wrapping ErrAborted that names the op, its sequence
// number and the peer.
//
// The groups themselves come from backends, in packages of their own that
// register by name (Register): distributed/backend/native runs cohort's
// collective plans over the tcp, shm and inproc transports, and
// distributed/backend/mpi hands each op to the MPI library. This package
// imports no backend; a program links them with a blank import, every one
// at once with distributed/backend/all:
//
//	import _ "github.com/cohortml/cohort/distributed/backend/all"
//
// Init joins a job with the backend Options.Backend names (native by
// default); InitFromEnv reads the launcher's environment (torchrun, Slurm,
// OpenMPI, Kubernetes) through package rendezvous, and COHORT_BACKEND.
package distributed
