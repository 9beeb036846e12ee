// Package inproc is a transport between goroutines of one process: each
// rank is an endpoint of a mesh built by NewMesh. It is the transport of
// unit tests and of single-process multi-rank runs.
//
// Send copies the payload straight into the buffer of a receiver already
// waiting for the tag, or into a queued copy if none is; it never blocks.
// Kill simulates the crash of a rank: its peers' pending and later calls
// involving it fail with a *transport.PeerError naming it, just as a dead
// process is reported by the tcp and shm transports.
//
// Blocking happens only on channel operations, so the transport works
// inside a testing/synctest bubble.
package inproc
