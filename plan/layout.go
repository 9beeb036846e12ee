package plan

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Shards are the ways the training state can be split over the
// data-parallel ranks, as cohort implements them.
var Shards = []string{"none", "zero1", "zero2", "fsdp"}

// Layout is one way to run a step: DP × PP × TP ranks (TP fastest, then
// PP, then DP, as package layout numbers them), the sharding of the
// training state over DP, the microbatches per replica and step, and the
// pipeline schedule with its chunks per rank.
type Layout struct {
	DP, PP, TP   int
	Shard        string // none, zero1, zero2, fsdp
	Microbatches int
	// Schedule is "none" without a pipeline (the microbatches run one
	// after another, their gradients accumulating), else gpipe, 1f1b,
	// interleaved or zb.
	Schedule string
	Virtual  int // chunks per pipeline rank: ≥ 2 for interleaved, else 1
}

// ScheduleName is the schedule as the plan lines print it: the name, with
// the chunks per rank after a colon for interleaved ("interleaved:2").
func (l Layout) ScheduleName() string {
	if l.Schedule == "interleaved" {
		return fmt.Sprintf("interleaved:%d", l.Virtual)
	}
	return l.Schedule
}

func (l Layout) String() string {
	return fmt.Sprintf("dp %d pp %d tp %d shard %s microbatches %d schedule %s", l.DP, l.PP, l.TP, l.Shard, l.Microbatches, l.ScheduleName())
}

// Cluster is where the job runs.
type Cluster struct {
	Nodes, ProcsPerNode int
	// MemPerRank is the memory one rank may use (0: the device's).
	MemPerRank int64
	// Cores is the cores (or devices) of a node that its ranks compute
	// on; 0: one per rank. A node with more ranks than cores is
	// oversubscribed: its ranks share the cores, and each rank's compute
	// and optimizer step take ProcsPerNode/Cores times as long as on a
	// core of its own (the operating system time-slices them).
	Cores int
}

// share is how many ranks of a node run on one core: ProcsPerNode/Cores
// when the node is oversubscribed, else 1.
func (c Cluster) share() float64 {
	if c.Cores <= 0 || c.ProcsPerNode <= c.Cores {
		return 1
	}
	return float64(c.ProcsPerNode) / float64(c.Cores)
}

// busy returns how many ranks of a node compute at once: every rank, or
// every core when the node is oversubscribed.
func (c Cluster) busy() int {
	if c.Cores > 0 && c.ProcsPerNode > c.Cores {
		return c.Cores
	}
	return c.ProcsPerNode
}

// Ranks returns Nodes·ProcsPerNode.
func (c Cluster) Ranks() int { return c.Nodes * c.ProcsPerNode }

// Times is the breakdown of a predicted step, in seconds. Step is the
// sum of the others: the busiest rank's compute, the tensor-parallel
// all-reduces on its critical path, the pipeline's fill and drain, its
// point-to-point transfers on the critical path, the data-parallel
// communication left exposed after overlap, and the optimizer step.
type Times struct {
	Compute, TP, Bubble, PP, DP, Optimizer float64
	// DPTotal is the data-parallel communication before overlap.
	DPTotal float64
	Step    float64
}

// Memory is the peak memory of the busiest rank, in bytes.
type Memory struct {
	Params, Grads, Optimizer, Activations, Buffers int64
	Total                                          int64
}

// Prediction is what the model predicts for one layout.
type Prediction struct {
	Layout
	MicroBatch   int // sequences (samples) per microbatch
	Times        Times
	Memory       Memory
	TokensPerSec float64
	// FLOPsPerRank is the model's training FLOPs (Model.TrainFLOPs) per
	// step time and rank: what papers report as "teraFLOP/s per GPU".
	FLOPsPerRank float64
	Fits         bool // Memory.Total ≤ the memory per rank
}

// Env is what a prediction needs besides the layout.
type Env struct {
	Model   *Model
	Device  *Device
	Fabric  *Fabric
	Cluster Cluster
}

func (e *Env) validate() error {
	if e.Model == nil || e.Device == nil || e.Fabric == nil {
		return errors.New("plan: a model, a device and a fabric are needed")
	}
	if err := e.Model.Validate(); err != nil {
		return err
	}
	if err := e.Device.Validate(); err != nil {
		return err
	}
	if err := e.Fabric.Validate(); err != nil {
		return err
	}
	if e.Cluster.Nodes < 1 || e.Cluster.ProcsPerNode < 1 {
		return fmt.Errorf("plan: %d nodes × %d ranks per node: want at least 1 of each", e.Cluster.Nodes, e.Cluster.ProcsPerNode)
	}
	if e.Cluster.Cores < 0 {
		return fmt.Errorf("plan: %d cores per node: want 0 (one per rank) or more", e.Cluster.Cores)
	}
	if e.Cluster.MemPerRank < 0 {
		return fmt.Errorf("plan: memory per rank %d: want bytes ≥ 0", e.Cluster.MemPerRank)
	}
	if _, err := e.Device.Peak(e.Model.precision().dtype); err != nil {
		return err
	}
	return nil
}

func (e *Env) memLimit() int64 {
	if e.Cluster.MemPerRank > 0 {
		return e.Cluster.MemPerRank
	}
	return e.Device.MemoryBytes
}

// flaw is why a layout cannot run; flawless is none. Layouts tries many
// candidates, so finding a flaw must not format an error.
type flaw int

const (
	flawless flaw = iota
	flawSizes
	flawWorld
	flawTPNode
	flawBatch
	flawMicroBatch
	flawShardMP
	flawShard
	flawMLP
	flawTPDivide
	flawStages
	flawNoSchedule
	flawNoPipeline
	flawInterleaved
	flawSchedule
	flawVirtual
)

func (e *Env) flaw(l Layout) flaw {
	m, c := e.Model, e.Cluster
	switch {
	case l.DP < 1 || l.PP < 1 || l.TP < 1 || l.Microbatches < 1 || l.Virtual < 1:
		return flawSizes
	case l.DP*l.PP*l.TP != c.Ranks():
		return flawWorld
	case c.ProcsPerNode%l.TP != 0:
		return flawTPNode
	case m.GlobalBatch%(l.DP*l.Microbatches) != 0:
		return flawBatch
	case m.MicroBatch > 0 && m.GlobalBatch/(l.DP*l.Microbatches) != m.MicroBatch:
		return flawMicroBatch
	case index(Shards, l.Shard) < 0:
		return flawShard
	case l.Shard != "none" && (l.PP > 1 || l.TP > 1):
		return flawShardMP
	case m.Kind == "mlp" && (l.PP > 1 || l.TP > 1):
		return flawMLP
	case m.Kind != "mlp" && (m.Heads%l.TP != 0 || m.ffn()%l.TP != 0 || m.Vocab%l.TP != 0):
		return flawTPDivide
	case m.Kind != "mlp" && l.PP*l.Virtual > m.Layers:
		return flawStages
	}
	switch l.Schedule {
	case "none":
		if l.PP != 1 {
			return flawNoSchedule
		}
	case "gpipe", "1f1b", "zb":
		if l.PP == 1 {
			return flawNoPipeline
		}
	case "interleaved":
		if l.PP == 1 || l.Virtual < 2 || l.Microbatches%l.PP != 0 {
			return flawInterleaved
		}
	default:
		return flawSchedule
	}
	if l.Schedule != "interleaved" && l.Virtual != 1 {
		return flawVirtual
	}
	return flawless
}

// check reports why l cannot run e's model on e's cluster, or nil.
func (e *Env) check(l Layout) error {
	m, c := e.Model, e.Cluster
	var why string
	switch e.flaw(l) {
	case flawless:
		return nil
	case flawSizes:
		why = "sizes, microbatches and virtual stages must be at least 1"
	case flawWorld:
		why = fmt.Sprintf("dp·pp·tp = %d, the cluster has %d ranks", l.DP*l.PP*l.TP, c.Ranks())
	case flawTPNode:
		why = fmt.Sprintf("tensor parallelism stays within a node: tp must divide %d ranks per node", c.ProcsPerNode)
	case flawBatch:
		why = fmt.Sprintf("global batch %d is not a multiple of dp·microbatches = %d", m.GlobalBatch, l.DP*l.Microbatches)
	case flawMicroBatch:
		why = fmt.Sprintf("microbatches of %d, the model asks for %d", m.GlobalBatch/(l.DP*l.Microbatches), m.MicroBatch)
	case flawShard:
		why = fmt.Sprintf("unknown shard %q (want none, zero1, zero2 or fsdp)", l.Shard)
	case flawShardMP:
		why = "cohort shards (zero1, zero2, fsdp) only pure data parallelism"
	case flawMLP:
		why = "an mlp runs data-parallel only"
	case flawTPDivide:
		why = fmt.Sprintf("tp %d must divide heads (%d), the MLP width (%d) and the vocabulary (%d; pad it)", l.TP, m.Heads, m.ffn(), m.Vocab)
	case flawStages:
		why = fmt.Sprintf("%d stages for %d layers", l.PP*l.Virtual, m.Layers)
	case flawNoSchedule:
		why = "a pipeline needs a schedule"
	case flawNoPipeline:
		why = fmt.Sprintf("schedule %s without a pipeline", l.Schedule)
	case flawInterleaved:
		why = "interleaved needs pp > 1, virtual ≥ 2 and microbatches a multiple of pp"
	case flawSchedule:
		why = fmt.Sprintf("unknown schedule %q", l.Schedule)
	case flawVirtual:
		why = "only interleaved has virtual stages"
	}
	return fmt.Errorf("plan: %v: %s", l, why)
}

func index(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// Predict returns the predicted step time and peak memory of l.
func Predict(e *Env, l Layout) (*Prediction, error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	if err := e.check(l); err != nil {
		return nil, err
	}
	p := e.predict(l)
	return &p, nil
}

// DDPBucketBytes is ddp's bucket cap (ddp.DefaultBucketCapBytes): the
// gradient all-reduce is issued in buckets of this size as they fill.
const DDPBucketBytes = 25 << 20

// rankCost is one pipeline rank's work for one microbatch.
type rankCost struct {
	f, b, w   float64 // compute seconds of forward, backward-input, backward-weight (recompute in b)
	tp        float64 // its tensor-parallel all-reduces, seconds
	params    int64
	act       int64 // activations of one microbatch-chunk held (largest chunk)
	headAct   int64 // logits held on the last rank
	blockAct  int64 // one block's full activations: the working set of a recomputed block
	unitBytes int64 // largest FSDP unit's parameters (one block)
}

// passTime is one pass over a layer: its weight products at the
// efficiency of their size, its attention products at that of one head's,
// and workPasses passes of its elementwise traffic at memory bandwidth;
// or, on a device measured on whole layers, all its FLOPs at the
// efficiency of the layer's size.
func (e *Env) passTime(c Cost, flops, attn, peak, workPasses float64) float64 {
	if e.Device.WholeLayer {
		return flops / (peak * e.Device.Fraction(c.GEMM))
	}
	t := workPasses * float64(c.WorkBytes) / e.Device.MemoryBandwidth
	if flops-attn > 0 {
		t += (flops - attn) / (peak * e.Device.Fraction(c.GEMM))
	}
	if attn > 0 {
		t += attn / (peak * e.Device.Fraction(c.AttnGEMM))
	}
	return t
}

// ranks returns the per-microbatch cost of each pipeline rank.
func (e *Env) ranks(l Layout, b int) []rankCost {
	m := e.Model
	pr := m.precision()
	peak, _ := e.Device.Peak(pr.dtype)
	tpGroup := Group{PerNode: l.TP, Nodes: 1}
	share := e.Cluster.share() // the node's cores shared; ranks side by side: sideBySide
	// what tensor parallelism pays here beyond the curve and the fabric
	// (Device.TensorParallel): 1 and 0 s without measured figures
	tpx := e.Device.TP(l.TP)
	layer := func(c Cost) (f, bw, w, tp float64) {
		k := share * tpx.Compute
		f = k * e.passTime(c, c.F, c.AttnF, peak, 1)
		bw = k * e.passTime(c, c.B, c.AttnB, peak, 2)
		w = k * e.passTime(c, c.W, 0, peak, 0)
		ar := e.Fabric.AllReduceTime(tpGroup, float64(c.TPBytes)) + tpx.CollectiveSeconds
		tp = float64(c.TPForward+c.TPBackward) * ar
		if m.Recompute {
			bw += f
			tp += float64(c.TPForward) * ar
		}
		for _, n := range c.TPSmallBytes {
			tp += e.Fabric.AllReduceTime(tpGroup, float64(n)) + tpx.SmallSeconds
		}
		return
	}
	if m.Kind == "mlp" {
		var r rankCost
		for _, c := range m.mlpCosts(b) {
			f, bw, w, _ := layer(c)
			r.f, r.b, r.w = r.f+f, r.b+bw, r.w+w
			r.params += c.Params
			r.act += c.ActBytes
			r.unitBytes = max(r.unitBytes, c.Params)
		}
		out := []rankCost{r}
		e.sideBySide(out)
		return out
	}
	blk := m.blockCost(b, l.TP)
	bf, bb, bw, btp := layer(blk)
	full := blk
	if m.Recompute {
		full = (&Model{Kind: m.Kind, Layers: m.Layers, DModel: m.DModel, Heads: m.Heads, FFN: m.FFN, Seq: m.Seq,
			Vocab: m.Vocab, Precision: m.Precision}).blockCost(b, l.TP)
	}
	stages := l.PP * l.Virtual
	out := make([]rankCost, l.PP)
	for st := range stages {
		n := m.Layers / stages
		if st < m.Layers%stages {
			n++
		}
		r := &out[st%l.PP]
		fn := float64(n)
		r.f += fn * bf
		r.b += fn * bb
		r.w += fn * bw
		r.tp += fn * btp
		r.params += int64(n) * blk.Params
		r.act = max(r.act, int64(n)*blk.ActBytes)
	}
	for i := range out {
		out[i].blockAct = full.ActBytes
		out[i].unitBytes = blk.Params
	}
	emb, head := m.embedCost(b, l.TP), m.headCost(b, l.TP)
	ef, eb, ew, etp := layer(emb)
	hf, hb, hw, htp := layer(head)
	if e.Device.WholeLayer {
		// a measured curve prices the head at its measured share of the
		// blocks' rate for the same microbatch
		hs := e.Device.Fraction(head.GEMM) / (e.Device.Fraction(blk.GEMM) * e.Device.HeadFraction(blk.GEMM))
		hf, hb, hw = hf*hs, hb*hs, hw*hs
	}
	if m.Recompute { // the recompute added by layer() applies to blocks only
		hb -= hf
	}
	first, last := &out[0], &out[l.PP-1]
	first.f, first.b, first.w, first.tp = first.f+ef, first.b+eb, first.w+ew, first.tp+etp
	first.params += emb.Params
	last.f, last.b, last.w, last.tp = last.f+hf, last.b+hb, last.w+hw, last.tp+htp
	last.params += head.Params
	if l.PP == 1 && m.tied() {
		last.params -= int64(m.DModel) * int64(m.Vocab) / int64(l.TP) // one copy when both ends share a rank
	}
	last.headAct = head.ActBytes
	e.sideBySide(out)
	return out
}

// sideBySide slows each pipeline rank's compute by the device's
// side-by-side factor (Device.SideBySide) for the ranks of its node that
// compute while it does: the node's busy ranks (Cluster.busy) when the
// others keep computing as long as it does (data parallelism's equal
// replicas), fewer in a pipeline, where a rank cheaper than r computes
// beside r for only its share of r's time: 1 + (busy − 1)·s ranks, s the
// mean over the other pipeline ranks of min(1, their compute / r's).
func (e *Env) sideBySide(out []rankCost) {
	busy := e.Cluster.busy()
	if busy <= 1 || len(e.Device.SideBySide) == 0 {
		return
	}
	t := make([]float64, len(out))
	for i, r := range out {
		t[i] = r.f + r.b + r.w
	}
	for i := range out {
		s := 1.0
		if len(out) > 1 && t[i] > 0 {
			s = 0
			for j := range out {
				if j != i {
					s += min(1, t[j]/t[i])
				}
			}
			s /= float64(len(out) - 1)
		}
		k := e.Device.sideBySide(1 + float64(busy-1)*s)
		out[i].f, out[i].b, out[i].w = k*out[i].f, k*out[i].b, k*out[i].w
	}
}

// StageCost is one pipeline rank's seconds for one microbatch (all its
// chunks): forward, backward-input and backward-weight.
type StageCost struct{ F, B, W float64 }

func (c StageCost) total() float64 { return c.F + c.B + c.W }

// Makespan returns the time of a pipeline step of microbatches over
// len(ranks) ranks (each holding virtual chunks) whose sends arrive comm
// seconds after they are made. The busiest rank computes every
// microbatch; the pipeline's fill and drain cost one microbatch of every
// other rank, divided by the chunks per rank for interleaved 1F1B
// (Narayanan et al. 2021: the bubble (p−1)/v of a microbatch), and for
// ZB-H1 (Qi et al. 2023) only F + B − W of it when m ≥ p (at least F),
// the weight passes filling the drain (fewer microbatches fill less); each of the p·v−1 stage boundaries adds comm
// to the critical path forward and backward. With equal ranks and free
// communication this is (m + (p−1)/v)·(F+B+W), pipeline.IdealBubble's
// makespan.
//
// 1F1B with m ≥ p is also bounded by its steady state: each microbatch's
// round trip from the first rank to the last and back makes 2(p−1)
// hand-offs while p microbatches are in flight, so a microbatch takes at
// least (Σ rank times + 2(p−1)·comm)/p; that bound, over m microbatches,
// the fill and the 2(p−2) hand-offs the round trips leave out, is charged
// when it is the larger. Latency thus costs 1F1B on every microbatch
// unless the busiest rank's lead over the others hides it (as the
// simulator finds: with equal ranks, 2(p−1)·m/p + 2(p−2) hand-offs).
func Makespan(schedule string, virtual, microbatches int, ranks []StageCost, comm float64) float64 {
	busiest := 0
	for i, r := range ranks {
		if r.total() > ranks[busiest].total() {
			busiest = i
		}
	}
	fill := 0.0
	p := len(ranks)
	for i, r := range ranks {
		if i == busiest {
			continue
		}
		if schedule == "zb" {
			// each other rank's weight pass of the first microbatch, and
			// of a share of the next min(m, p)−1, fills the drain
			k := 1 + float64(min(microbatches, p)-1)/float64(p-1)
			fill += max(r.total()-k*r.W, r.F)
		} else {
			fill += r.total()
		}
	}
	v := float64(max(virtual, 1))
	span := float64(microbatches)*ranks[busiest].total() + fill/v + 2*(float64(p)*v-1)*comm
	if schedule == "1f1b" && microbatches >= p {
		sum := 0.0
		for _, r := range ranks {
			sum += r.total()
		}
		period := max(ranks[busiest].total(), (sum+2*float64(p-1)*comm)/float64(p))
		span = max(span, float64(microbatches)*period+fill+2*float64(p-2)*comm)
	}
	return span
}

// InFlight returns how many microbatch-chunks pipeline rank i holds
// activations for at once under l's schedule, as pipeline.Simulate counts
// them (Result.Peak): every microbatch for GPipe, min(m, p−i) for 1F1B,
// min(m, p) for ZB-H1, and for interleaved 1F1B its warm-up, (v−1)·p + 2(p−i−1)
// chunks, plus the one in flight, capped by the m·v chunks there are.
func InFlight(l Layout, i int) int {
	m, p, v := l.Microbatches, l.PP, l.Virtual
	switch l.Schedule {
	case "gpipe":
		return m
	case "1f1b":
		return min(m, p-i)
	case "zb":
		return min(m, p) // the deferred weight passes keep every rank's activations longer
	case "interleaved":
		return min(m*v, (v-1)*p+2*(p-i-1)+1)
	}
	return 1
}

func (e *Env) predict(l Layout) Prediction {
	m, f := e.Model, e.Fabric
	pr := m.precision()
	b := m.GlobalBatch / (l.DP * l.Microbatches)
	rs := e.ranks(l, b)
	mb := float64(l.Microbatches)
	var t Times
	stages := make([]StageCost, len(rs))
	busiest := 0
	for i, r := range rs {
		stages[i] = StageCost{F: r.f + r.tp/2, B: r.b + r.tp/2, W: r.w}
		if stages[i].total() > stages[busiest].total() {
			busiest = i
		}
	}
	top := rs[busiest]
	t.Compute = mb * (top.f + top.b + top.w)
	t.TP = mb * top.tp
	if l.TP > 1 {
		// the gradient norm's all-reduce (one float64) once a step
		t.TP += f.AllReduceTime(Group{PerNode: l.TP, Nodes: 1}, 8) + e.Device.TP(l.TP).SmallSeconds
	}
	if l.PP > 1 {
		interPP := l.TP*l.PP > e.Cluster.ProcsPerNode || e.Cluster.ProcsPerNode%(l.TP*l.PP) != 0
		// a hand-off: the fabric's message and the measured wake-up
		c := f.P2PTime(interPP, float64(int64(b)*int64(m.Seq)*int64(m.DModel)*pr.act)) + e.Device.HandoffSeconds
		span := Makespan(l.Schedule, l.Virtual, l.Microbatches, stages, c)
		t.PP = 2 * float64(l.PP*l.Virtual-1) * c
		t.Bubble = max(0, span-t.Compute-t.TP-t.PP)
		t.PP += e.stepSync(l, interPP)
	}

	// Data parallelism: the DP group's placement (stride tp·pp).
	stride := l.TP * l.PP
	g := Group{PerNode: 1, Nodes: l.DP}
	if stride < e.Cluster.ProcsPerNode {
		k := min(l.DP, e.Cluster.ProcsPerNode/stride)
		g = Group{PerNode: k, Nodes: (l.DP + k - 1) / k}
	}
	params := top.params
	for _, r := range rs {
		params = max(params, r.params)
	}
	gradBytes := float64(params * pr.grad)
	paramBytes := float64(params * pr.param)
	bwdLast := top.b + top.w
	fwd := top.f
	nb := max(1, int(math.Ceil(gradBytes/DDPBucketBytes)))
	updated := params
	d := int64(l.DP)
	switch {
	case l.DP == 1:
	case l.PP > 1 || l.TP > 1:
		// package layout: one all-reduce of every gradient after the
		// pipeline's step, nothing to overlap with.
		t.DPTotal = f.AllReduceTime(g, gradBytes)
		t.DP = t.DPTotal
	case l.Shard == "none":
		t.DPTotal = f.AllReduceTime(g, gradBytes)
		t.DP = overlapped(t.DPTotal, nb, bwdLast)
	case l.Shard == "zero1":
		ar, ag := f.AllReduceTime(g, gradBytes), f.AllGatherTime(g, paramBytes)
		t.DPTotal = ar + ag
		t.DP = overlapped(ar, nb, bwdLast) + ag
		updated = (params + d - 1) / d
	case l.Shard == "zero2":
		rsT, ag := f.ReduceScatterTime(g, gradBytes), f.AllGatherTime(g, paramBytes)
		t.DPTotal = rsT + ag
		t.DP = overlapped(rsT, nb, bwdLast) + ag
		updated = (params + d - 1) / d
	case l.Shard == "fsdp":
		units := m.Layers + 1
		if m.Kind == "mlp" {
			units = len(m.Widths) - 1
		}
		ag, rsT := f.AllGatherTime(g, paramBytes), f.ReduceScatterTime(g, gradBytes)
		t.DPTotal = 2*mb*ag + rsT
		t.DP = mb*overlapped(ag, units, fwd) + (mb-1)*overlapped(ag, units, bwdLast) + overlapped(ag+rsT, units, bwdLast)
		updated = (params + d - 1) / d
	}
	// Adam reads parameters, gradients and state and writes parameters
	// and state.
	t.Optimizer = e.Cluster.share() * float64(updated*(2*pr.param+pr.grad+2*pr.opt)) / e.Device.MemoryBandwidth
	t.Step = t.Compute + t.TP + t.Bubble + t.PP + t.DP + t.Optimizer

	// Memory of the fullest rank.
	var mem Memory
	for i, r := range rs {
		var x Memory
		x.Params = r.params * pr.param
		x.Grads = r.params * pr.grad
		x.Optimizer = r.params * pr.opt
		switch l.Shard {
		case "zero1":
			x.Optimizer = ceilDiv(r.params*pr.opt, d)
		case "zero2":
			// the full-size bucket buffers are kept for the step (zero's
			// Memory.BufferBytes), the averaged gradient is a 1/N shard
			x.Buffers = x.Grads
			x.Grads = ceilDiv(r.params*pr.grad, d)
			x.Optimizer = ceilDiv(r.params*pr.opt, d)
		case "fsdp":
			x.Params = ceilDiv(r.params*pr.param, d)
			x.Grads = ceilDiv(r.params*pr.grad, d)
			x.Optimizer = ceilDiv(r.params*pr.opt, d)
			x.Buffers = 2*r.unitBytes*pr.param + r.unitBytes*pr.grad // two gathered units (prefetch) and one unit's full gradient
		}
		x.Activations = int64(InFlight(l, i)) * r.act
		if m.Recompute && m.Kind != "mlp" {
			x.Activations += r.blockAct
		}
		if r.headAct > 0 {
			hold := int64(1)
			if l.Schedule == "gpipe" {
				hold = int64(l.Microbatches)
			}
			x.Activations += hold * r.headAct
		}
		x.Total = x.Params + x.Grads + x.Optimizer + x.Activations + x.Buffers
		if x.Total > mem.Total {
			mem = x
		}
	}
	pred := Prediction{Layout: l, MicroBatch: b, Times: t, Memory: mem}
	pred.TokensPerSec = float64(m.Tokens()) / t.Step
	pred.FLOPsPerRank = m.TrainFLOPs() / t.Step / float64(e.Cluster.Ranks())
	pred.Fits = mem.Total <= e.memLimit()
	return pred
}

// stepSync prices the synchronisation a pipeline's Step ends with
// (package pipeline): with tied embeddings, an all-reduce of the tied
// weights' gradient (the embedding's share of each tensor-parallel rank)
// between the first and the last stage's ranks, then a broadcast of the
// loss (8 bytes) from the last stage to every pipeline rank, a binomial
// tree of ⌈log₂ p⌉ rounds. Every message step also pays the device's
// measured hand-off (Device.HandoffSeconds): a ring all-reduce of two
// ranks makes two.
func (e *Env) stepSync(l Layout, inter bool) float64 {
	m, f, h := e.Model, e.Fabric, e.Device.HandoffSeconds
	g := Group{PerNode: 2, Nodes: 1}
	if inter {
		g = Group{PerNode: 1, Nodes: 2}
	}
	t := 0.0
	if m.Kind != "mlp" && m.tied() {
		t += f.AllReduceTime(g, float64(int64(m.Vocab)*int64(m.DModel)/int64(l.TP)*m.precision().grad)) + 2*h
	}
	rounds := math.Ceil(math.Log2(float64(l.PP)))
	return t + rounds*(f.P2PTime(inter, 8)+h)
}

// overlapped returns the exposed part of total seconds of communication
// issued in n equal pieces, piece i as soon as 1/n of a window of
// computation has passed for each piece before it, one piece at a time:
// the last piece at least, or, when the communication outruns the
// computation, everything past the window but the first piece's wait.
func overlapped(total float64, n int, window float64) float64 {
	if total == 0 {
		return 0
	}
	fn := float64(max(n, 1))
	return max(total/fn, window/fn+total-window)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func divisors(n int) []int {
	var out []int
	for i := 1; i <= n; i++ {
		if n%i == 0 {
			out = append(out, i)
		}
	}
	return out
}

// Layouts lists every layout the model allows on the cluster (whether
// it fits in memory or not), in a fixed order.
func (e *Env) Layouts() []Layout {
	m, c := e.Model, e.Cluster
	var out []Layout
	world := c.Ranks()
	for _, tp := range divisors(c.ProcsPerNode) {
		if world%tp != 0 {
			continue
		}
		for _, pp := range divisors(world / tp) {
			dp := world / (tp * pp)
			if m.GlobalBatch%dp != 0 {
				continue
			}
			perReplica := m.GlobalBatch / dp
			var mbs []int
			if m.MicroBatch > 0 {
				if perReplica%m.MicroBatch == 0 {
					mbs = []int{perReplica / m.MicroBatch}
				}
			} else {
				mbs = divisors(perReplica)
			}
			for _, mbc := range mbs {
				var scheds []Layout
				if pp == 1 {
					scheds = []Layout{{Schedule: "none", Virtual: 1}}
				} else {
					scheds = []Layout{{Schedule: "gpipe", Virtual: 1}, {Schedule: "1f1b", Virtual: 1}, {Schedule: "zb", Virtual: 1}}
					if m.Kind != "mlp" {
						for v := 2; pp*v <= m.Layers; v++ {
							if m.Layers%(pp*v) == 0 {
								scheds = append(scheds, Layout{Schedule: "interleaved", Virtual: v})
							}
						}
					}
				}
				for _, s := range scheds {
					for _, sh := range Shards {
						l := Layout{DP: dp, PP: pp, TP: tp, Shard: sh, Microbatches: mbc, Schedule: s.Schedule, Virtual: s.Virtual}
						if e.flaw(l) == flawless {
							out = append(out, l)
						}
					}
				}
			}
		}
	}
	return out
}

// ErrNoLayout is wrapped by Search's error when no layout fits.
var ErrNoLayout = errors.New("plan: no layout")

// Search predicts every layout and returns those that fit in memory,
// fastest first (ties: less memory first, then the layout's text). When
// none fits, the error names the smallest memory per rank that would fit
// and the layout that needs it.
func Search(e *Env) ([]Prediction, error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	ls := e.Layouts()
	if len(ls) == 0 {
		return nil, fmt.Errorf("%w for model %s on %d nodes × %d ranks (global batch %d, micro-batch %d: dp·microbatches must divide the batch; tp must divide the ranks per node, the heads and the vocabulary)",
			ErrNoLayout, e.Model.Name, e.Cluster.Nodes, e.Cluster.ProcsPerNode, e.Model.GlobalBatch, e.Model.MicroBatch)
	}
	var fit []Prediction
	var smallest *Prediction
	for _, l := range ls {
		p := e.predict(l)
		if p.Fits {
			fit = append(fit, p)
		} else if smallest == nil || p.Memory.Total < smallest.Memory.Total {
			smallest = &p
		}
	}
	if len(fit) == 0 {
		return nil, fmt.Errorf("%w fits model %s: it needs at least %s per rank (%v), the ranks have %s",
			ErrNoLayout, e.Model.Name, mib(smallest.Memory.Total), smallest.Layout, mib(e.memLimit()))
	}
	sortPredictions(fit)
	return fit, nil
}

func sortPredictions(ps []Prediction) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.TokensPerSec != b.TokensPerSec {
			return a.TokensPerSec > b.TokensPerSec
		}
		if a.Memory.Total != b.Memory.Total {
			return a.Memory.Total < b.Memory.Total
		}
		return a.Layout.String() < b.Layout.String()
	})
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
