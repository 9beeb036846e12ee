// Package bench is the Go side of cohort's training benchmarks: `cohort
// bench train` (the anchor MLP and LeNet under ddp, GPT-mini, and the
// sharded-training workload under ddp, ZeRO-1/2 or FSDP) and `cohort bench
// pipeline` (GPT-mini's pipeline schedules against one stage). Each entry
// point parses its flags, starts --world worker processes through the
// launcher (package launch, as `cohort run` does) by re-running the
// command it is given, and prints rank 0's result; the scripts beside it
// (vs_pytorch.sh, vs_gloo.sh, vs_mpi.sh) run the same workloads in
// PyTorch, Gloo and MPI for comparison.
//
// cmd/cohort only dispatches to it; the workloads' models come from
// package models.
package bench
