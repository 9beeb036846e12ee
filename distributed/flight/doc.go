// Package flight is the data model and the analysis of cohort's collective
// flight recorder: each rank keeps a small ring of its last ops (kind,
// sequence number, size, queued/started/ended times, the caller), and when
// an op has waited too long the rings of every rank of the group are put
// side by side to name who is missing and where it last was:
//
//	dist: watchdog: allreduce #1580 stuck: rank 1 never entered it (its last: broadcast #1579 at main.train, done 61s ago; 1579 ops issued, 1579 finished); ranks 0,2,3 waiting in it for 61s
//
// The package is pure: Snapshot is what a rank publishes (through the store,
// as a heartbeat), Encode and Decode move it, and Diagnose turns the
// snapshots into a Diagnosis. Package distributed records the rings and runs the
// watchdog; the analysis is tested here as text transcripts (testdata/,
// go test -update rewrites them). It imports nothing of cohort, so a
// launcher can read the same snapshots.
//
// The design follows PyTorch's NCCL flight recorder
// (TORCH_NCCL_TRACE_BUFFER_SIZE) and Horovod's stall check, which names the
// ranks that have not submitted a tensor after 60 s.
package flight
