// Package transporttest is the conformance suite every transport.Transport
// implementation runs: ordered delivery per tag, tags that do not block
// each other, concurrent senders, zero-length and large messages, length
// mismatches, Close, cancellation and the death of a peer. It also holds
// what the transports' tests share besides: setting up a world
// (ConnectWorld, WorldOf, PeersWorld), the real-process tests
// (ProcessTests, HelperProcess) and the ping-pong, exchange and
// throughput benchmarks (Benchmarks).
//
// Import it only from _test.go files.
package transporttest
