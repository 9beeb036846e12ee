// Package rendezvous answers "who am I in this job, and where is the
// store?". FromEnv is the one place the distributed environment contract
// is read: torchrun's variables (also set by cohort run and Kubeflow's
// PyTorchJob), Slurm's, OpenMPI's and a Kubernetes Indexed Job's, with the
// precedence documented on FromEnv; a missing or contradictory variable is
// an error naming it and what was expected. NodeFromEnv is the launcher's
// counterpart (node count, node rank, node 0's address).
//
// Connect then returns the job's store.Store: a launcher's store when
// COHORT_STORE_ADDR says one is served, otherwise a tcpstore served by
// rank 0 at MASTER_ADDR:MASTER_PORT, authenticated with COHORT_TOKEN, and
// dialled with retries by every rank until the context ends.
//
// A process group is typically built as
//
//	info, err := rendezvous.FromEnv(os.Getenv)
//	…
//	st, err := rendezvous.Connect(ctx, info, rendezvous.Options{})
//
// and the store then carries transport addresses and barriers.
//
// A worker tells its launcher why it failed through the error file
// TORCHELASTIC_ERROR_FILE names (torchrun's JSON, which cohort run sets
// and reads): Fail writes it and returns the exit status (128+N after
// signal N), SignalContext remembers which signal stopped the worker and
// when, and RecordSignal notes a signal as soon as it ends a context.
package rendezvous
