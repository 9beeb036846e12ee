// Package pipeline is pipeline model parallelism: a model cut into
// stages, one group of stages per rank, microbatches flowing forward
// through the ranks and gradients flowing back.
//
// # Schedules
//
// A Schedule is a pure plan: for each rank, the ordered list of its
// actions for one training step (forward of microbatch m, backward, the
// split backward's input and weight passes, and the sends and receives
// between them). NewSchedule builds GPipe, 1F1B, interleaved 1F1B
// (virtual stages: stage s on rank s mod P) and ZB-H1; each is written in
// its own file with a reference. Goldens of the plans live in
// testdata/schedules (datadriven transcripts: go test -rewrite rewrites
// them).
//
// Simulate runs a schedule symbolically (sends never block, a receive
// waits for its send, messages between two ranks arrive in order) with
// given costs for F, B, W and communication. It proves the plan sound: no
// deadlock, every receive gets the message it expects, nothing is used
// before it is produced, every microbatch-stage is computed exactly once;
// and it measures the makespan, the bubble (idle fraction) and the peak
// number of microbatches whose activations each rank holds. The tests run
// it over stages 1–8 × microbatches 1–16 (× virtual stages 1–4 for
// interleaved) and check GPipe's and 1F1B's bubble, (P−1)/(M+P−1), and
// ZB-H1's idle time, a third of 1F1B's at the same peak memory.
//
// # Splitting a model
//
// A split of n layers into stages is a list of bounds. Uniform cuts evenly;
// Balance cuts layers with measured costs so that the slowest stage is as
// fast as possible; CheckSplit validates a split given by hand. Asking for
// more stages than layers is an error, as are microbatches that do not
// divide the batch (MicrobatchSize).
//
// # Executor
//
// New builds a Pipeline for one rank from a process group (the pipeline
// ranks), a schedule and the rank's stages (the Stage interface: Forward
// on a microbatch, and Parameters). Step runs one step: it performs the
// schedule's actions in order on per-link subgroups, sending as soon as
// data is ready and receiving where the schedule puts the receive, right
// before the compute that consumes it. A send does not wait for its
// receive (the transports buffer it), so the data is there by then, and
// compute waits only where its message is truly late. Receives, and
// sends where the group buffers them (Options.SendsBuffered), run on
// Step's goroutine (Work.Wait runs them inline), not on dist's op
// goroutines: on a host whose cores all compute, a rank per core, every
// hand-off between goroutines waits for the scheduler to give a core to
// another thread (a slice, milliseconds), and a receive posted early keeps
// an op goroutine waiting in the transport while compute runs, which
// preempts compute (see "Where the time goes"). The last stage's Forward returns the loss;
// Step scales it by 1/M (Options.LossScale) before backward, so the
// gradients equal those of the whole batch, and returns the mean loss on
// every rank. The executor is a state machine over the action list with
// its I/O (dist's Send/Recv, the stages' compute) injected.
//
// Ranks first all-gather a fingerprint of the schedule, the microbatches,
// the activation shape, recomputation and the split: ranks that disagree
// get an error naming which ranks have what. A rank that fails (its stage
// errors or panics, or a peer dies) aborts every subgroup the pipeline
// uses; dist then fails the peers' pending operations at once, and every
// rank's error names the rank where the failure began (carried in the tag
// of the abort, see abortTagBase).
//
// # Split backward (zero bubble)
//
// ZB-H1 needs the backward pass in two parts: B, the gradient of the
// stage's input, which the previous stage waits for, and W, the gradient
// of the stage's weights, which nobody waits for and which fills the
// bubbles. The executor uses autograd.BackwardSplit, a real split rather
// than a deferred copy: during B, every op that consumes a weight skips
// the weight's gradient (Linear skips its weight GEMM, an Embedding does
// not run at all) and keeps its saved tensors and output gradient; W runs
// those ops again for the weights only. The simpler alternative, running
// the whole backward at B and only accumulating the parameter gradients at
// W, would keep the numbers but not the point: W would cost nothing, and
// the bubble would stay 1F1B's. LayerNorm, whose input and weight
// gradients come out of one pass over the rows, computes both at B and
// hands the weights' part on at W. Storage is recycled as in a whole
// backward (autograd.BackwardSplit), so that B and W together cost about
// what one backward does (on GPT-mini's last stage, 1.036 times as much,
// median of 40 alternated runs in one process). A W that runs after other
// microbatches' passes reads its tensors back from memory (another 1.035
// times), so ZB-H1 defers only the W passes that fill the end of the
// step, and runs the others right after their B (see zbh1Order).
//
// # Also
//
//   - Options.Recompute: the forward pass keeps only each stage's input and
//     runs without a graph; the stage's forward runs again, tracked, just
//     before its backward.
//   - Options.Tied: parameters shared by the first and the last stage (GPT's
//     token embedding and head) have their gradients summed between those
//     two ranks at the end of Step, so both copies take the same step.
//     Only the Step's own contribution is summed, so gradients accumulated
//     over several Steps count each Step once.
//   - Pipeline.ClipGradNorm: global-norm clipping over all stages, the
//     squared norms all-reduced over the pipeline group (ClipGradNorm for
//     any group), the tied copy counted once.
//   - Options.StageDone: called right after the last backward pass of each
//     stage of the rank in a step, when that stage's gradients are final
//     (the tied ones aside); layout starts the stage's data-parallel
//     all-reduce there, so it overlaps the rest of the pipeline step.
//
// # Where the time goes
//
// Stats break each rank's time in Step down into the passes (F, whole B,
// the split backward's input and weight passes, with counts), waiting for
// received data, sending and the step-end
// collectives. Stats.Costs turns the measured pass durations into Costs,
// and Costs.Ranks lets the simulator run stages of unequal cost, so the
// bubble the schedule implies for the measured costs can be set beside
// the bubble measured (cohort bench pipeline prints both). Options.Span
// records a per-action timeline (cohort bench pipeline --trace DIR, then
// cohort trace merge DIR) that shows where the idle time sits; --profile
// DIR writes each rank's CPU profile, allocation profile and Go execution trace.
//
// Measured on two cores with shared memory (GPT-mini, 2 stages, 8
// microbatches): posting every receive when the step starts, as the
// executor first did, left an op goroutine per link waiting in the shm
// transport (spinning, then futex sleeps of 2 ms) during compute. Each
// such wait is a system call holding a P, which Go's sysmon retakes and
// then keeps polling every 20 µs; the host saw 3,800 context switches a
// second against 580 over TCP, the compute threads were preempted
// thousands of times a second, and the stages' compute took 15–20% longer
// than the same passes in one process. Handing each send to an op
// goroutine put a scheduler slice between a pass's end and its message
// (median 0.7 ms for a gradient, 3.3 ms for an activation). Receiving
// at the consumer and running both on Step's goroutine removed both.
//
// What is left is for the process to make its own progress, as an MPI
// rank does. With one rank per core, run the ranks with GOMAXPROCS 1
// (cohort bench pipeline does): the sends and receives then run on the
// thread that computes, nothing hands off between two threads sharing
// the rank's CPU, the garbage collector takes its turn on that thread
// rather than a time slice from it, and a receiver on one host polls
// through its wait instead of sleeping on a futex (dist's long spin), so
// the neighbour's message is taken 42–49 µs after its pass ends, against
// 105 µs with a futex sleep and 165 µs with two threads per rank (medians
// of the waits that were late, from --trace). Over 9 alternated rounds
// on two vCPUs of a noisy Intel Xeon host (family 6, model 207), 1F1B on
// 2 stages with 8 microbatches went from 0.88 to 0.93–0.94 of its ideal
// speedup with this and a step that reuses its memory (see autograd).
// The rest is mostly the host: the two CPUs' speeds differed by 3–28 %
// between runs, and the slower stage sets the pace.
//
// Every wait is bounded by the caller's ctx and by dist's op timeout. A
// rank whose own ctx is cancelled reports the failure as its own, so its
// peers name it, not the neighbour it was waiting for.
package pipeline
