// Package collbench is `cohort bench allreduce` (and broadcast, allgather,
// reducescatter): it starts --world local processes of the running binary
// through the launcher of `cohort run` (package launch, so one list of
// torchrun's variables serves both), or under mpirun with --backend mpi,
// joins them through the environment and
// measures one collective over a list of sizes with the method of the
// PyTorch/Gloo anchor: float32 buffers, a warm-up of 20 iterations (5 from
// 16 MiB) whose mean — the maximum over ranks — sets the iteration count
// (about one second of timed loop, clamped to [10, 1000]); each iteration
// timed on its own, the times combined across ranks with an element-wise
// maximum, and the median reported. algbw = bytes/time; busbw applies the
// nccl-tests factors (all-reduce 2(n−1)/n, all-gather and reduce-scatter
// (n−1)/n, broadcast 1). A one-off check of the result follows each size.
// Each worker runs with the cores divided among the workers (GOMAXPROCS,
// at least 1; --threads overrides), as torchrun gives each worker one
// OpenMP thread and MPI ranks are single-threaded.
package collbench
