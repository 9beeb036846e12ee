// Package native is the native backend of package distributed: a
// ProcessGroup that runs cohort's own collective plans (package
// collective) over a transport (tcp, shm, inproc, or a route mixing them).
// Importing it registers it under the name "native", the default of
// distributed.Init; New builds a group over a transport already connected
// (the tests' inproc meshes).
//
// Ops on one group run in the order they were issued, on a goroutine the
// group owns (or on the waiting goroutine when nothing else runs); several
// may be in flight. Every op carries a fingerprint (kind, dtype, count,
// root, seq) that peers check, so ranks that call different collectives
// get an error naming both ranks and both calls instead of a hang. A
// failed or timed-out op aborts the group: pending and later ops fail with
// an error wrapping distributed.ErrAborted that names the op, its sequence
// number and the peer, and the other ranks are told (an abort notice) so
// they fail fast too. Each group keeps a flight recorder of its last ops,
// which the watchdog (watchdog.go) publishes and diagnoses.
//
// Init joins a job through a store: it claims this rank (join.go), learns
// which ranks share a host, and connects shm within a host and tcp across
// hosts (init.go).
package native
