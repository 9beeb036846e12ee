// Package mpi is the MPI backend of package distributed: a ProcessGroup
// whose ops are the MPI library's own nonblocking collectives, loaded at
// run time (no cgo; see distributed/internal/mpi). Importing it registers
// it under the name "mpi" (Options.Backend, COHORT_BACKEND=mpi); mpi.go
// describes its threading, errors and lifetime, and what MPI cannot do
// (cancel a collective, survive a dead peer).
package mpi
