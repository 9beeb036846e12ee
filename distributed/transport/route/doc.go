// Package route combines transports that each reach some of the ranks into
// one transport that reaches them all: messages to and from rank r travel
// through the transport assigned to r. Its use is a job spread over several
// hosts, whose ranks reach the ranks on their own host through shared
// memory (package shm with shm.Options.Peers) and the others over TCP
// (package tcp with tcp.Options.Peers).
//
// Every part keeps the world's rank numbers, so a route adds no
// translation: Send and Recv check the rank and call the part's, and the
// part's errors come back unchanged, naming ranks of the world (a
// *transport.PeerError names the peer's rank in the world). The contract
// of transport.Transport holds because each pair of ranks uses one part:
// per-tag ordering between a pair is the part's own, and a dead peer is
// detected by the part that reaches it, as fast as that part detects it
// (milliseconds for a killed process under shm and tcp alike).
package route
