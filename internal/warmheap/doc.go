// Package warmheap keeps a training loop's memory mapped from its first
// timed step on.
//
// A page of fresh memory costs a page fault on its first touch: about
// 0.1–0.5 µs on bare-metal Intel, about 9 µs on some KVM guests (AMD EPYC
// Zen 5, 2 vCPUs). Go's collector lets the heap grow to GOGC % above the
// live heap before it collects, so a step that leaves G bytes of garbage
// touches fresh pages for live·GOGC/100 / G steps before the heap stops
// growing. A data set in memory makes the live heap large (the anchors'
// 60,000 synthetic MNIST samples are 188 MB), so at GOGC=100 the LeNet step
// (0.8 MB of garbage once tensor's spare pool serves its scratch) faulted
// for hundreds of steps, each paying ~200 faults.
//
// Two levers, each decided from measurements of the running process:
//
//   - Less garbage (package tensor): tensors and op scratch come from the
//     spare pool that autograd refills, so a step reuses last step's pages.
//   - A heap goal sized to the step (Fit): after the warm-up steps, the
//     garbage per step G, the step time T, the cost C of a full collection
//     and the cost F of a fresh page are measured. When the faults the
//     default goal still has ahead, F·live·GOGC/100/4096, would cost more
//     than a few steps, the goal is lowered to live + H with H = G·k (at
//     least MinHeadroomBytes), k the number of steps that makes a
//     collection cost under 1 % of them (k·T·1% ≥ C); and the H bytes are
//     touched once (Prefault) so that the timed steps find them mapped.
//   - The growth touched ahead: where the goal stays (lowering it would
//     not lower it, or the user set GOGC or GOMEMLIMIT) but the faults
//     ahead still cost more than a step, the growth the goal allows is
//     touched once, with transparent huge pages where the kernel gives
//     them on request. The heap would grow there anyway, a few MiB a
//     step; a GPipe stage of GPT-mini (49 MiB live, 4.3 MiB of garbage a
//     step) spent its first ten steps 60 % slower on this machine.
//     Where faults are cheap (under a step's time in all), nothing
//     changes.
//
// Fit runs once, after a warm-up; Loop runs it in a training loop that has
// none (examples/gpt's, the pipeline and sharded-training benchmarks',
// the planner's tensor-parallel profile), after its first steps.
// COHORT_FIT_HEAP=0 turns Loop off.
//
// Huge pages and MAP_POPULATE were not taken: Go's heap is the runtime's
// to map, and the pool's storage is Go memory the collector must see.
//
// Tax reproduces expensive faults anywhere: it charges each minor fault of
// the process a given cost (busy waiting), so a developer on a machine with
// cheap faults sees the slow start of a machine with dear ones (`cohort
// bench train` reads COHORT_PAGE_FAULT_COST, e.g. 9us).
package warmheap
