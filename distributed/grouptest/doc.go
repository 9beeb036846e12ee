// Package grouptest is the conformance suite every backend of package
// distributed passes (distributed/backend/native in conformance_test.go,
// distributed/backend/mpi in mpi_test.go, and any backend added later): each op over every dtype and reduce op, element counts
// including 0 and ones that do not divide by the world size, subgroups
// formed with distributed.NewGroup, asynchronous Works completing in issue order,
// and the errors of invalid calls and closed groups.
//
// A backend supplies a World that runs a function on every rank of a
// group: the native backend runs the ranks as goroutines over an inproc
// mesh (distributedtest.RunWith), the MPI backend runs one rank per
// process under mpirun, where the World serves only the world size mpirun started. The
// tests are written so that every rank issues the same ops in the same
// order even when a check fails (failures are reported with t.Errorf),
// so that a failure never leaves the other processes waiting.
//
// Import it only from _test.go files.
package grouptest
