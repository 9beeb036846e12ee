// Package distributedtest runs multi-rank code inside one test process: every rank
// is a goroutine with its own distributed.ProcessGroup over an in-process
// transport. It is for _test.go files only.
//
// Run and RunWith start one goroutine per rank, each with its own group
// over an inproc mesh; CheckLeaks catches goroutines of package distributed (or
// below) left running after a test.
package distributedtest
