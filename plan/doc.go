// Package plan predicts the step time and peak memory per rank of every
// way to lay a training job out on a cluster (DP × PP × TP, the sharding
// of the training state, the microbatches and the pipeline schedule) and
// ranks them, so that a user can choose a layout, for hardware at hand or
// not, without running a grid. It is a cost model made of pure functions:
// it reads the JSON it is given (a model, a device, a fabric) and does no
// other I/O.
//
// # Inputs
//
//   - Model: a GPT-style decoder (layers, width, heads, MLP width,
//     sequence, vocabulary, tied embeddings) or an MLP, the global batch,
//     the microbatch size (or every size that divides the batch), fp32 or
//     mixed precision, full recomputation or none. NamedModel has the
//     repository's: gpt (GPT-mini), gpt2 (GPT-2 small), mlp (the MNIST
//     MLP). Cost documents the FLOP and activation accounting
//     (Narayanan et al. 2021; Korthikanti et al. 2022).
//   - Device: peak FLOP/s per dtype, memory, memory bandwidth and one
//     efficiency curve, the fraction of peak a layer's products reach as a
//     function of their size. Kept in the repository: a100-80gb and
//     h100-sxm (plan/devices); measured on this machine by `cohort plan
//     profile` from a pipeline run's trace (Measure, AddMeasurement).
//   - Fabric: α–β per link class (intra-node: NVLink, shared memory;
//     inter-node: InfiniBand, TCP), optionally per collective; rings
//     across nodes are hierarchical. Kept: dgx-a100, dgx-h100, local
//     (plan/fabrics). A missing, negative or zero figure is an error
//     naming the field. Fitted to measurements by FitLink and
//     FabricFromFits (`cohort plan fit`): least squares on the relative
//     error of time = α·steps + bytes·factor/β with the ring terms the
//     cost functions charge (RingTerms), per collective and link class,
//     so that the fabric gives back the measured times. Where one line is
//     off by more than 25 % somewhere, the fit tries a second β for the
//     bytes of a buffer past a break size (each sample size that leaves
//     two sizes on either side) and keeps the best when it halves the
//     squared residuals: Link.Beyond (messages past the caches; older
//     fabric files have none and price every byte at one β).
//
// # The step
//
// Step time = compute + tensor-parallel all-reduces + bubble + pipeline
// transfers + exposed data-parallel communication + optimizer, with the
// overlap rules cohort implements:
//
//   - compute: the busiest pipeline rank's passes for every microbatch;
//     each pass's weight products at the curve's efficiency for their
//     size, its attention products at that of one head's product, and its
//     elementwise traffic (the activations it stores, written forward,
//     read and their gradients written backward) at memory bandwidth;
//     on a device measured here (cohort plan profile, WholeLayer) each
//     block's passes at the curve's rate of whole blocks for the
//     microbatch, and the output layer with its loss at their own
//     measured share of it (EfficiencyPoint.Head: the last stage's
//     passes beyond its blocks; on GPT-mini the softmax and cross-entropy
//     over the vocabulary run at about half the blocks' rate, which made
//     the last stage, the busiest, look cheaper than it is). A node with
//     more ranks than cores (Cluster.Cores) shares them: every rank's
//     compute and optimizer step take ranks/cores times as long. Ranks
//     computing at once on a node slow each other (memory bandwidth,
//     shared caches, SMT siblings): on a device with side_by_side
//     (Device.SideBySide, measured by cohort plan profile from a
//     pipeline's passes against the same passes of its one-rank
//     baseline, the slowdown charged to the share of time they ran side
//     by side: MeasureSideBySide) the curve is a rank's rate alone and
//     each rank's compute takes the factor for the node's ranks that
//     compute beside it times as long: all its busy ranks (its ranks, or
//     its cores when oversubscribed) for data parallelism's equal
//     replicas, fewer beside a pipeline's busiest rank, whose cheaper
//     neighbours compute for only their share of its time;
//   - tensor parallelism (package tp, Megatron's f and g), on the
//     critical path, as cohort's tp runs it: per block two all-reduces of
//     the microbatch's activations forward (attention's and the MLP's g)
//     and two backward (their f; two more with recomputation), one
//     forward after the vocabulary-parallel embedding and one backward
//     for the f before the vocabulary-parallel head: 4L + 2 a microbatch;
//     the vocabulary-parallel cross-entropy's two small all-reduces (the
//     rows' maxima, 4 bytes a token; their sums and target logits, 16)
//     a microbatch, and the gradient norm's (8 bytes) a step. Each is
//     the fabric's all-reduce for its size plus, on a device measured
//     here, the time a tensor-parallel run's collectives took beyond it
//     as their callers waited (TPPoint.CollectiveSeconds for the
//     activations', SmallSeconds for the small ones: waking the peer and
//     the peer arriving late); the sharded layers' compute is the
//     curve's time for their FLOPs (every product divided by tp) times
//     TPPoint.Compute, the measured compute outside the collectives over
//     that time (narrower products run slower per FLOP; LayerNorms,
//     residual additions and the loss's elementwise work are replicated,
//     not divided). The figures are Device.TensorParallel, per tp degree,
//     measured by cohort plan validate's profile from a tensor-parallel
//     GPT-mini's steps (MeasureTP): they follow package tp as it gets
//     faster, and a device without them (the A100's, the H100's) is the
//     curve and the fabric alone;
//   - pipeline (package pipeline): Makespan, checked against
//     pipeline.Simulate in the tests (package pipeline imports
//     distributed, which this package does not, so the bubble is modelled
//     analytically: (p−1)/v of a microbatch for GPipe, 1F1B and
//     interleaved 1F1B, less for ZB-H1), plus one transfer per stage
//     boundary forward and backward on the critical path, and for 1F1B
//     the steady state's round trips (2(p−1) hand-offs per p
//     microbatches) where the busiest rank's lead does not hide them; a
//     hand-off is the fabric's message plus, on a device that has it,
//     the measured hand-off latency (Device.HandoffSeconds: the median
//     time from a pass's end to the end of the receive waiting for its
//     output, less the fastest, MeasureHandoff). The step ends as
//     package pipeline's does: an all-reduce of the tied embedding's
//     gradient between the first and the last stage, and a broadcast of
//     the loss to every stage (⌈log₂ p⌉ rounds), each message step
//     paying the hand-off latency too;
//   - data parallelism: package layout's one all-reduce of the gradients
//     after the pipeline's step (with pp or tp > 1), not overlapped; ddp's
//     bucketed all-reduce (25 MiB buckets) overlapped with the last
//     microbatch's backward except what outruns it and the last bucket;
//     zero1 the same plus an all-gather of the parameters after the step;
//     zero2 a bucketed reduce-scatter overlapped likewise plus that
//     all-gather; fsdp an all-gather per unit (block) prefetched during the
//     forward and again the backward, and the reduce-scatter during the
//     backward. cohort shards only pure data parallelism, so sharded
//     layouts have pp = tp = 1;
//   - optimizer: Adam reading parameters, gradients and state and writing
//     parameters and state at memory bandwidth (a 1/N shard when sharded);
//     on a device measured here, memory_bandwidth is the rate of the work
//     a step does outside its pipeline (AdamW, clipping, zeroing the
//     gradients, the batch) in the profiled run, per byte AdamW moves
//     (MeasureOptimizer).
//
// Peak memory per rank: parameters, gradients and Adam's state (8 bytes a
// parameter in fp32, 12 in mixed precision: master copy and two moments),
// divided as the shard divides them (zero2 keeps its full-size gradient
// buckets for the step, as package zero does; fsdp holds two gathered
// units), plus the activations of the microbatches in flight on the
// fullest rank (InFlight, as the simulator counts them) and, with
// recomputation, one block's full activations.
//
// # Search and report
//
// Search predicts every layout Env.Layouts allows (TP within a node and
// dividing heads, MLP width and vocabulary; dp·microbatches dividing the
// batch; interleaved with v chunks dividing the layers) and returns those
// that fit, fastest first; when none fits, its error names the smallest
// memory per rank that would. Sweep and Families follow node counts (8 to
// 4,096 nodes in a fraction of a second per model) and say where each
// layout shape stops scaling and why: bubble, exposed all-reduce, memory,
// or a batch too small for more replicas.
//
// The cost model is checked against Narayanan et al. 2021, Table 1
// (testdata/megatron2021, TestMegatron2021): every row predicted with one
// device and fabric description.
package plan
