// Package tcp is a transport over TCP connections, for ranks on any
// hosts.
//
// Setup is two-phase so that addresses can travel through a store: every
// rank calls Listen, publishes Listener.Addr, collects everyone's address
// and calls Listener.Connect. Each pair of ranks shares one connection,
// dialed by the higher rank and authenticated by a mutual HMAC-SHA256
// challenge–response over the job's token (see Options.Token). Sockets use
// TCP_NODELAY and keepalive probes. A rank may connect only some of the
// world (Options.Peers), keeping the world's rank numbers: in a job spread
// over hosts, the ranks on other hosts, while those on its own host share
// memory (package shm; package route combines the two).
//
// Frames are those of package wire. One reader goroutine per connection
// demultiplexes arriving messages by tag: a message whose receiver is
// already waiting is read from the socket straight into the receiver's
// buffer; others are queued in memory until received, so a Send never
// waits for the matching Recv (only for socket buffer space). The reader
// is a state machine fed by non-blocking reads, so a receiver that is
// waiting may advance it too: with Options.Spin it polls the socket on
// its own goroutine for that long, plus the time the message takes to
// arrive at 1 GB/s (for a message of at most 1 MiB), before waiting for
// the reader goroutine,
// whose wake-up through the runtime's poller costs tens of microseconds
// on a virtual machine (a 4 KiB all-reduce of two ranks on loopback went
// from 25-35 to 9 µs on an Intel Xeon VM). A sender somebody waits for
// writes without blocking for as long, and while the socket is full it
// advances the reader instead: two ranks sending to each other at once
// each drain the other's bytes rather than both waiting for their reader
// goroutines to be woken. Messages
// larger than Options.ChunkBytes are sent as several frames, and frames of
// small messages to the same peer may travel between them.
//
// Loopback connections use cubic congestion control where the system's
// default is BBR, which falls into a slow state there (see
// Options.Congestion).
//
// A peer whose process dies closes its connections (the kernel does it),
// which fails pending and later calls involving it at once with a
// *transport.PeerError; a peer host that vanishes is detected by keepalive
// after about Options.Liveness.
package tcp
