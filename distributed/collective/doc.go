// Package collective implements cohort's collective algorithms as pure
// plans plus one executor.
//
// A Plan is the list of steps one rank performs for one call — send a
// region of a buffer to a peer, receive a message into a region, reduce two
// regions into a third, copy, average — computed by NewPlan from the call,
// the group size, the rank and a Tuning, with no I/O. Each algorithm lives
// in its own file (allreduce_ring.go, allreduce_recursive_doubling.go, …),
// opening with a prose description and a reference. Plans are tested as
// data: a symbolic simulator runs every rank's plan and checks that each
// output element holds exactly the right contributions, and text goldens in
// testdata/ pin them down (datadriven transcripts: go test -rewrite
// rewrites them).
//
// An Executor runs plans over a transport.Transport. Plans whose steps
// may run strictly in order and whose messages are at most
// Tuning.InlineBytes (Plan.Inline) run on the caller's goroutine with no
// hand-offs: small ones, and the ring plans of any size, which then go
// segment by segment (a rank sends one segment and receives one in turn,
// so no link ever holds more than a segment or two). The others hand
// sends and receives to one goroutine per peer and direction, and a step
// waits only for the earlier transfers whose memory it touches, so
// receiving piece k+1 overlaps with reducing piece k. The executor relies
// on the transport contract that a Send completes without waiting for the
// matching Recv (inproc, tcp and shm queue early messages).
//
// Why large ring plans run inline: on two cores the hand-offs cost more
// than the overlap gains. A waiting goroutine that sleeps in a futex keeps
// its P, so with the link goroutines and the caller sharing a P each
// waited for the others in turn; measured on a 2-core AMD EPYC (Zen 5) VM,
// world 2 over shared memory, the 3 MiB all-gather took 570 µs through the
// link goroutines and 190 µs inline, the 16 MiB all-reduce 6.8 ms and
// 2.2 ms.
//
// Every op starts with a fingerprint exchange (kind, dtype, op, count,
// root, seq) between each rank and the peers it talks to plus its ring
// neighbours — riding in front of the first message of an inline plan, so
// small ops pay no extra message — and ranks that issued different calls
// at the same sequence number fail with a *DesyncError naming both ranks
// and both calls instead of hanging or exchanging garbage. When the two
// calls' first messages differ in length the transport rejects the message
// unread, but its error (a *transport.LengthError) carries the message's
// first bytes, from which the peer's fingerprint is still decoded. An op that
// times out names the ranks whose fingerprint never arrived: the ones that
// have not started it.
//
// Algorithms: all-reduce by ring (bandwidth-optimal), recursive doubling
// (latency-optimal), recursive halving-doubling (medium sizes), with
// non-power-of-two groups folded, and direct exchange (one round); broadcast and reduce by binomial tree and
// pipelined chain; all-gather and reduce-scatter by ring and direct
// exchange; pairwise all-to-all; direct gather and scatter; dissemination
// barrier; point-to-point send and receive. Choose picks by payload size
// and group size. Reductions support Sum, Avg, Max, Min and Prod on
// float32, float64, int64, bfloat16 and float16 (the 16-bit types reduce
// through float32, rounding to nearest even at each step). Results are
// bitwise identical on every rank.
//
// The package imports only package transport: buffers are raw bytes of the
// call's dtype, and ranks in a plan are group ranks, mapped to transport
// ranks by the Executor.
package collective
