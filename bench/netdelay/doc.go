// Command netdelay adds a fixed one-way delay to TCP connections, for
// links that need latency where the kernel has no netem
// (CONFIG_NET_SCH_NETEM unset): bench/plan_netns.sh runs it in the router
// namespace between its hosts.
//
// It accepts connections on --listen and relays each to its destination:
// the connection's original destination, read with getsockopt
// SO_ORIGINAL_DST after a netfilter redirect (nft `redirect to :PORT` in
// the router's prerouting hook), or the fixed --upstream address. Its own
// connections to the destinations leave through the output hook, so the
// prerouting redirect does not catch them again.
//
// Each direction of a relayed connection is a reader and a writer: the
// reader stamps every chunk it reads with the time it was read and queues
// it; the writer writes each chunk no earlier than its stamp plus --delay.
// The queue holds at most --queue bytes (in chunks of at most --chunk
// bytes); a full queue stops the reader, so the sender's TCP window closes
// as it would on a slow link. A steady stream therefore moves at the
// rate of the slower of the links and the relay, --delay later, as long as
// --queue covers the bytes in flight over --delay (rate × delay: 6.25 MB
// at 25 Gbit/s and 2 ms).
//
// A peer's half-close reaches the other peer --delay later, after the
// bytes before it; an error on either side (a reset, a failed write)
// resets both connections at once. Each relayed connection ends when both
// directions have ended, and every goroutine of it with it. The relay
// completes a client's handshake before it dials the destination, so a
// destination that refuses shows to the client as a reset just after
// connecting rather than as a refused connection.
//
// The relay copies every byte through user space twice (read and write),
// so at high rates it needs CPU of its own: plan_netns.sh reports its CPU
// time beside each run.
//
//	netdelay --listen :15001 --delay 2ms                    # after nft redirect
//	netdelay --listen 127.0.0.1:9000 --upstream 127.0.0.1:8000 --delay 5ms
package main
