// Package multihost tests cohort across several "hosts" on one machine:
// each host is a Linux network namespace with its own address, joined to
// the others by veth pairs on a bridge that lives in a hub namespace.
// `cohort run` is started once per host (--nnodes, --node-rank,
// --master-addr pointing at host 0), exactly as on a real cluster, and the
// tests check what only a network between nodes shows: rendezvous across
// hosts, the transport chosen per link, failure propagation between
// launchers, and behaviour on a rate-limited link (tc tbf).
//
// Rules the tests keep: every process that sends or receives traffic runs
// inside a namespace the test created (ip netns exec), never in the
// initial namespace; no namespace gets a default route, so nothing leaves
// the machine; namespace names carry the test binary's pid and every
// namespace, process and qdisc created is removed on the way out, on
// failure too; processes are stopped only by the pids the test started
// or was told by its own workers.
//
// The tests need root and permission to create network namespaces, and
// skip, saying why, without them:
//
//	go test ./tests/multihost/          # as root
//	go test -v -run TestMultiHost/ratelimit ./tests/multihost/
//
// The cohort binary and the worker program (testdata/worker) are built
// once per run into a temporary directory.
package multihost
