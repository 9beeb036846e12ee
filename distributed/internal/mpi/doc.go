// Package mpi binds the few MPI functions the MPI backend of package distributed
// uses, loading the library at run time through purego (no cgo): Open
// MPI's libmpi.so.40 or an MPICH-ABI library (MPICH, Intel MPI, MVAPICH,
// Cray MPICH: libmpi.so.12).
//
// The two ABIs differ in their handles. Open MPI's MPI_Comm, MPI_Datatype,
// MPI_Op and MPI_Errhandler are pointers to global objects in the library
// (MPI_COMM_WORLD is &ompi_mpi_comm_world), resolved here with Dlsym;
// MPICH's are 32-bit integers fixed by its mpi.h (MPI_COMM_WORLD is
// 0x44000000), kept in a table. Handles travel as uintptr either way; the
// out-parameters MPI writes a handle into (MPI_Request *, MPI_Comm *) are
// 8-byte zeroed words, which read back the same on little-endian machines
// whether the library wrote 4 bytes or 8. The magic pointers differ too:
// MPI_IN_PLACE is 1 in Open MPI and -1 in MPICH, MPI_STATUS_IGNORE 0 and 1.
//
// Calls are raw: they return MPI's error code, and Error turns a code into
// an error carrying MPI's own message. Thread safety is MPI's: the caller
// honours the level Init reports.
package mpi
