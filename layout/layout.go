package layout

import (
	"context"
	"errors"
	"fmt"
	"github.com/cohortml/cohort/internal/dp/reducer"
	"github.com/cohortml/cohort/internal/dp/wrapcore"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/pipeline"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tp"
)

// Config describes a layout and the shape of its steps. The zero value of
// every size means 1 (and "" the 1F1B schedule); Batch and SeqLen are
// required.
type Config struct {
	// DP, PP and TP are the sizes of the mesh's data-, pipeline- and
	// tensor-parallel dimensions; their product must be the world size.
	DP, PP, TP int
	// Microbatches is the number of microbatches each step's batch is cut
	// into for the pipeline; it must divide Batch.
	Microbatches int
	// Schedule is the pipeline schedule: "gpipe", "1f1b", "interleaved"
	// or "zb" (pipeline.Names).
	Schedule string
	// Virtual is the number of stages per pipeline rank for the
	// interleaved schedule (0 means 2 there, 1 otherwise).
	Virtual int
	// Recompute recomputes each stage's forward pass before its backward
	// pass instead of keeping its activations (pipeline.Options.Recompute).
	Recompute bool
	// Batch is the number of sequences each data-parallel replica trains
	// on per step (the global batch is DP·Batch), SeqLen their length.
	Batch, SeqLen int
	// Split optionally gives the stage bounds over the blocks (stage s
	// holds blocks [Split[s], Split[s+1]); see pipeline.Balance); nil cuts
	// them uniformly.
	Split []int
}

func (c Config) withDefaults() Config {
	one := func(v *int) {
		if *v == 0 {
			*v = 1
		}
	}
	one(&c.DP)
	one(&c.PP)
	one(&c.TP)
	one(&c.Microbatches)
	if c.Schedule == "" {
		c.Schedule = "1f1b"
	}
	if c.Virtual == 0 {
		c.Virtual = 1
		if c.Schedule == "interleaved" {
			c.Virtual = 2
		}
	}
	return c
}

// String describes the layout, e.g. "dp 2 × pp 2 × tp 1, 1f1b, 4 microbatches of 2×16".
func (c Config) String() string {
	s := fmt.Sprintf("dp %d × pp %d × tp %d, %s", c.DP, c.PP, c.TP, c.Schedule)
	if c.Virtual > 1 {
		s += fmt.Sprintf(" (%d virtual stages per rank)", c.Virtual)
	}
	if c.Microbatches > 0 {
		s += fmt.Sprintf(", %d microbatches of %d×%d", c.Microbatches, c.Batch/c.Microbatches, c.SeqLen)
	}
	if c.Recompute {
		s += ", recompute"
	}
	if c.Split != nil {
		s += fmt.Sprintf(", split %v", c.Split)
	}
	return s
}

// check validates c (with defaults applied) for a model of config m on
// world ranks and returns the schedule and the split.
func (c Config) check(m models.GPTConfig, world int) (*pipeline.Schedule, []int, error) {
	for _, d := range []struct {
		name string
		v    int
	}{{"dp", c.DP}, {"pp", c.PP}, {"tp", c.TP}, {"microbatches", c.Microbatches}, {"virtual", c.Virtual}} {
		if d.v < 1 {
			return nil, nil, fmt.Errorf("layout: %s = %d, want >= 1", d.name, d.v)
		}
	}
	if n := c.DP * c.PP * c.TP; n != world {
		return nil, nil, fmt.Errorf("layout: dp %d × pp %d × tp %d = %d ranks, but the process group has %d", c.DP, c.PP, c.TP, n, world)
	}
	if c.Batch < 1 || c.SeqLen < 1 {
		return nil, nil, fmt.Errorf("layout: batch %d × sequence length %d, want both >= 1", c.Batch, c.SeqLen)
	}
	if c.SeqLen > m.Ctx {
		return nil, nil, fmt.Errorf("layout: sequence length %d exceeds the model's context %d", c.SeqLen, m.Ctx)
	}
	if c.Batch%c.Microbatches != 0 {
		return nil, nil, fmt.Errorf("layout: %d microbatches do not divide a batch of %d sequences per data-parallel replica", c.Microbatches, c.Batch)
	}
	if err := tp.CheckConfig(m, c.TP); err != nil {
		return nil, nil, fmt.Errorf("layout: tp %d: %w", c.TP, err)
	}
	sched, err := pipeline.NewSchedule(c.Schedule, c.PP, c.Virtual, c.Microbatches)
	if err != nil {
		return nil, nil, fmt.Errorf("layout: %w", err)
	}
	stages := sched.NumStages()
	if stages > m.NLayer {
		return nil, nil, fmt.Errorf("layout: %d pipeline stages (pp %d × %d per rank) for %d layers: every stage needs at least one layer", stages, c.PP, c.Virtual, m.NLayer)
	}
	split := c.Split
	if split == nil {
		if split, err = pipeline.Uniform(m.NLayer, stages); err != nil {
			return nil, nil, fmt.Errorf("layout: %w", err)
		}
	} else {
		if len(split) != stages+1 {
			return nil, nil, fmt.Errorf("layout: split %v has %d stages, the layout has %d (pp %d × %d per rank)", split, len(split)-1, stages, c.PP, c.Virtual)
		}
		if err := pipeline.CheckSplit(m.NLayer, split); err != nil {
			return nil, nil, fmt.Errorf("layout: %w", err)
		}
	}
	return sched, split, nil
}

// Trainer is one rank's part of a GPT trained on a dp × pp × tp mesh: its
// pipeline stages (sharded over tp), the pipeline executor over the pp
// group and the gradient average over the dp group.
//
// Every rank of the mesh must call Step, ClipGradNorm, FullStateDict,
// GatherInto, LoadFull and Eval in the same order (they communicate). A
// Trainer is used by one goroutine at a time. After an error from Step,
// ClipGradNorm or Eval (a peer failing, a ctx ending, or a batch of the
// wrong size) the Trainer is broken: it has aborted the mesh's groups, so
// its peers fail promptly too, and every later call returns that error.
type Trainer struct {
	cfg    Config
	model  models.GPTConfig
	split  []int
	mesh   *distributed.Mesh
	comm   *tp.Comm
	pl     *pipeline.Pipeline
	stages []*tp.GPTStage
	shards []tp.Shard // distinct parameters of this rank, in stage order
	// counted[i] reports whether shards[i] counts in the gradient norm and
	// is this pipeline rank's to contribute to FullStateDict: false only
	// for the last stage's copy of the tied embedding, on its own rank.
	counted []bool
	names   []string // the full model's parameter names, in order
	shape   map[string][]int

	// The data-parallel gradient average overlaps the pipeline: each
	// stage's gradients are all-reduced over dp as soon as the stage's
	// last backward pass of the step is done (pipeline
	// Options.StageDone), the tied embedding's once Step has summed it.
	// The buckets are the stages' groups of shards, last stage first, then
	// the rest; the data-parallel wing's bucket state machine
	// (internal/dp/reducer) starts each one in that order as soon as its
	// shards are final, as ddp's does per parameter.
	dpGroups map[int][]int    // global stage → indices into shards
	dpRest   []int            // shards reduced after the pipeline step
	dpRed    *reducer.Reducer // nil without data parallelism
	dpBufs   [][]float32      // all-reduce buffer of each bucket
	dpOff    []int            // each shard's offset in its bucket's buffer
	dpCtx    context.Context  // the step's, while its buckets are reduced
	stepCtx  context.Context  // set inside the pipeline step
	dpEarly  int              // all-reduces launched inside the pipeline step, so far
	dpErr    error            // a stage's gradients refused by the reducer this step
	err      error
}

// Build sets this rank's part of the layout up: it checks cfg, arranges
// pg's ranks as a mesh dp × pp × tp, shards the stages this rank holds of
// full (every rank passes a model with the same weights, for example
// built from the same seed; full is not used afterwards) and forms the
// pipeline. It is a collective op of pg: every rank calls it with the
// same cfg. A bad cfg gets an error naming the sizes on every rank, and
// ranks whose cfgs differ get an error naming them; neither hangs.
func Build(ctx context.Context, pg distributed.ProcessGroup, cfg Config, full *models.GPT) (*Trainer, error) {
	if pg == nil || full == nil {
		return nil, errors.New("layout: Build: nil process group or model")
	}
	cfg = cfg.withDefaults()
	sched, split, cerr := cfg.check(full.Config, pg.Size())
	if err := agree(ctx, pg, cfg, full.Config, cerr); err != nil {
		return nil, err
	}
	mesh, err := distributed.NewMesh(ctx, pg, distributed.MeshDim{Name: "dp", Size: cfg.DP}, distributed.MeshDim{Name: "pp", Size: cfg.PP}, distributed.MeshDim{Name: "tp", Size: cfg.TP})
	if err != nil {
		return nil, fmt.Errorf("layout: %w", err)
	}
	t := &Trainer{cfg: cfg, model: full.Config, split: split, mesh: mesh, comm: tp.NewComm(mesh.Group("tp")), shape: map[string][]int{}}
	for _, p := range full.NamedParameters() {
		t.names = append(t.names, p.Name)
		t.shape[p.Name] = p.Param.Value.Shape()
	}
	ppRank := mesh.Coord("pp")
	var want []int
	for c := range sched.Virtual {
		want = append(want, c*sched.Stages+ppRank)
	}
	if t.stages, err = tp.NewGPTStages(t.comm, full, split, want); err != nil {
		return nil, fmt.Errorf("layout: rank %d: %w", pg.Rank(), err)
	}
	holdsFirst := sched.RankOf(0) == ppRank
	var tied []*autograd.Var
	var pstages []pipeline.Stage
	for _, st := range t.stages {
		pstages = append(pstages, st)
		if st.First || st.Last {
			tied = append(tied, st.Wte.Weight)
		}
	}
	tied = slices.Compact(tied) // one Var when a rank holds both ends
	mb := cfg.Batch / cfg.Microbatches
	opts := pipeline.Options{Shape: []int{mb, cfg.SeqLen, full.Config.D}, Recompute: cfg.Recompute, Tied: tied, Split: split,
		SendsBuffered: distributed.SendsBuffered(mesh.Group("pp"))}
	if cfg.DP > 1 {
		opts.StageDone = t.stageDone
	}
	t.pl, err = pipeline.New(ctx, mesh.Group("pp"), sched, pstages, opts)
	if err != nil {
		return nil, fmt.Errorf("layout: rank %d: %w", pg.Rank(), err)
	}
	t.shards = tp.StageShards(t.stages)
	t.dpGroups = map[int][]int{}
	for j, s := range t.shards {
		stage := -1
		if !slices.Contains(tied, s.Param) {
			for i, st := range t.stages {
				if slices.Contains(st.Parameters(), s.Param) {
					stage = want[i]
					break
				}
			}
		}
		if stage < 0 {
			t.dpRest = append(t.dpRest, j)
		} else {
			t.dpGroups[stage] = append(t.dpGroups[stage], j)
		}
	}
	if cfg.DP > 1 {
		if err := t.planDP(); err != nil {
			return nil, fmt.Errorf("layout: rank %d: %w", pg.Rank(), err)
		}
	}
	for _, s := range t.shards {
		isTied := slices.Contains(tied, s.Param)
		// The tied embedding counts (and is gathered) on the first stage's
		// rank only.
		t.counted = append(t.counted, !isTied || holdsFirst)
	}
	return t, nil
}

// agree all-gathers, over pg, a fingerprint of cfg and whether it checked
// out, and returns an error on every rank if any rank's check failed or
// the ranks' configurations differ, naming the ranks.
func agree(ctx context.Context, pg distributed.ProcessGroup, cfg Config, m models.GPTConfig, cerr error) error {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%+v|%d", cfg, m, cfg.Batch)
	bad := int64(0)
	if cerr != nil {
		bad = 1
	}
	mine := []int64{int64(h.Sum64()), bad}
	all := make([]int64, 2*pg.Size())
	if err := pg.AllGather(ctx, distributed.I64(all), distributed.I64(mine)).Wait(); err != nil {
		if cerr != nil {
			return cerr
		}
		return fmt.Errorf("layout: rank %d: agreeing on the layout: %w", pg.Rank(), err)
	}
	if cerr != nil {
		return cerr
	}
	var failed, differ []string
	for r := range pg.Size() {
		if all[2*r+1] != 0 {
			failed = append(failed, strconv.Itoa(r))
		} else if all[2*r] != mine[0] {
			differ = append(differ, strconv.Itoa(r))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("layout: rank %d: the layout is invalid on rank(s) %s", pg.Rank(), strings.Join(failed, ", "))
	}
	if len(differ) > 0 {
		return fmt.Errorf("layout: ranks disagree on the layout: rank %d has %s (model %+v) but rank(s) %s have another",
			pg.Rank(), cfg, m, strings.Join(differ, ", "))
	}
	return nil
}

// Config returns the layout's configuration, defaults filled in.
func (t *Trainer) Config() Config { return t.cfg }

// Mesh returns the dp × pp × tp mesh.
func (t *Trainer) Mesh() *distributed.Mesh { return t.mesh }

// Pipeline returns the pipeline executor (for its Stats).
func (t *Trainer) Pipeline() *pipeline.Pipeline { return t.pl }

// DataRank returns this rank's data-parallel replica, in [0, DP): the
// replica trains on sequences [DataRank()·Batch, (DataRank()+1)·Batch) of a
// global batch of DP·Batch sequences.
func (t *Trainer) DataRank() int { return t.mesh.Coord("dp") }

// Split returns the stage bounds over the blocks.
func (t *Trainer) Split() []int { return slices.Clone(t.split) }

// Stages returns this rank's stages, in chunk order.
func (t *Trainer) Stages() []*tp.GPTStage { return slices.Clone(t.stages) }

// Shards returns this rank's distinct parameters with their names (the
// full model's) and placements, in stage order.
func (t *Trainer) Shards() []tp.Shard { return slices.Clone(t.shards) }

// Parameters returns this rank's distinct parameters, in Shards order: what
// the optimizer on this rank updates.
func (t *Trainer) Parameters() []*autograd.Var {
	out := make([]*autograd.Var, len(t.shards))
	for i, s := range t.shards {
		out[i] = s.Param
	}
	return out
}

// Step runs one training step on this replica's batch: idx and targets are
// Batch·SeqLen token ids and next-token targets, row-major, the same on
// every rank of the replica (the ranks with the same DataRank; a rank
// reads only what its stages need, so the others may pass nil). It zeroes
// the gradients, runs the forward and backward passes of every microbatch
// under the schedule, sums the tied embedding's gradient between the first
// and the last stage, and averages every gradient over the data-parallel
// replicas. It returns the mean loss over the global batch, on every rank.
func (t *Trainer) Step(ctx context.Context, idx, targets []int64) (float64, error) {
	if t.err != nil {
		return 0, t.err
	}
	for _, s := range t.shards {
		if s.Param.Grad == nil {
			s.Param.Grad = tensor.New(s.Param.Value.Shape()...)
		} else {
			s.Param.Grad.Zero()
		}
	}
	for _, st := range t.stages {
		if err := st.SetBatch(ctx, idx, targets, t.cfg.Batch, t.cfg.SeqLen, t.cfg.Microbatches); err != nil {
			return 0, t.fail(fmt.Errorf("layout: rank %d: %w", t.mesh.Rank(), err))
		}
	}
	if t.dpRed != nil {
		t.dpCtx = ctx
		t.dpRed.Arm(true, false)
	}
	t.stepCtx = ctx
	loss, err := t.pl.Step(ctx)
	t.stepCtx = nil
	if err == nil {
		err = t.comm.Err()
	}
	if err != nil {
		return 0, t.fail(err)
	}
	if t.cfg.DP > 1 {
		if loss, err = t.syncGrads(ctx, loss); err != nil {
			return 0, t.fail(err)
		}
	}
	return loss, nil
}

// planDP lays the data-parallel buckets out: one per stage this rank
// holds, last stage first (the order the pipeline's backward passes end
// in), then the shards reduced after the pipeline step.
func (t *Trainer) planDP() error {
	stages := make([]int, 0, len(t.dpGroups))
	for st := range t.dpGroups {
		stages = append(stages, st)
	}
	slices.Sort(stages)
	slices.Reverse(stages)
	var buckets [][]int
	for _, st := range stages {
		buckets = append(buckets, t.dpGroups[st])
	}
	if len(t.dpRest) > 0 {
		buckets = append(buckets, t.dpRest)
	}
	t.dpOff = make([]int, len(t.shards))
	for _, b := range buckets {
		n := 0
		for _, j := range b {
			t.dpOff[j] = n
			n += t.shards[j].Param.Value.Len()
		}
		t.dpBufs = append(t.dpBufs, wrapcore.AlignedFloats(n))
	}
	var err error
	t.dpRed, err = reducer.New(len(t.shards), buckets, (*dpIO)(t), true)
	return err
}

// stageDone marks a stage's gradients final once the pipeline reports
// the stage's last backward pass of the step; the reducer starts every
// bucket now complete, in order.
func (t *Trainer) stageDone(stage int) {
	if t.stepCtx == nil || t.dpRed == nil {
		return
	}
	for _, j := range t.dpGroups[stage] {
		if err := t.dpRed.Ready(j); err != nil && t.dpErr == nil {
			t.dpErr = fmt.Errorf("layout: rank %d: stage %d: %w", t.mesh.Rank(), stage, err)
		}
	}
}

// dpIO is the reducer's I/O: a bucket's buffer, packed from its shards'
// gradients, is averaged over the dp group and copied back.
type dpIO Trainer

// Take implements reducer.IO: it packs shard j's gradient into its bucket.
func (io *dpIO) Take(j int, used bool) error {
	t := (*Trainer)(io)
	g := t.shards[j].Param.Grad
	dst := t.dpBufs[t.dpRed.BucketOf(j)][t.dpOff[j]:]
	dst = dst[:t.shards[j].Param.Value.Len()]
	if used && g != nil {
		copy(dst, g.Contiguous().Data())
	} else {
		clear(dst)
	}
	return nil
}

// Start implements reducer.IO: the bucket's average over the dp group.
func (io *dpIO) Start(k int) reducer.Handle {
	t := (*Trainer)(io)
	if t.stepCtx != nil {
		t.dpEarly++
	}
	return dpHandle{t: t, k: k, w: t.mesh.Group("dp").AllReduce(t.dpCtx, distributed.F32(t.dpBufs[k]), distributed.Avg)}
}

// Agree implements reducer.IO; the buckets are never rebuilt.
func (io *dpIO) Agree(order []int) ([]int, error) { return order, nil }

// Replan implements reducer.IO; the buckets are never rebuilt.
func (io *dpIO) Replan([]int) ([][]int, error) {
	return nil, errors.New("layout: data-parallel buckets cannot be rebuilt")
}

// dpHandle is one bucket's all-reduce in flight.
type dpHandle struct {
	t *Trainer
	k int
	w distributed.Work
}

func (h dpHandle) Done() <-chan struct{} { return distributed.Completion(h.w) }

// Finish waits for the all-reduce (or the step's context) and copies the
// averaged gradients back into the bucket's shards.
func (h dpHandle) Finish() error {
	t := h.t
	if err := wait(t.dpCtx, h.w); err != nil {
		return err
	}
	buf := t.dpBufs[h.k]
	for _, j := range t.dpRed.Buckets()[h.k] {
		s := t.shards[j]
		g := s.Param.Grad
		if !g.IsContiguous() {
			g = tensor.New(g.Shape()...)
			s.Param.Grad = g
		}
		copy(g.Data(), buf[t.dpOff[j]:t.dpOff[j]+g.Len()])
	}
	return nil
}

// syncGrads finishes the average of every gradient of this rank and of
// the loss over the dp group: the stages' buckets were started during the
// pipeline step; the tied embedding's and the loss's start now.
func (t *Trainer) syncGrads(ctx context.Context, loss float64) (float64, error) {
	defer func() { t.dpCtx, t.dpErr = nil, nil }()
	if err := t.dpErr; err != nil {
		t.dpRed.Disarm()
		return 0, err
	}
	for _, j := range t.dpRest {
		if err := t.dpRed.Ready(j); err != nil {
			return 0, fmt.Errorf("layout: rank %d: %w", t.mesh.Rank(), err)
		}
	}
	l := []float64{loss}
	wl := t.mesh.Group("dp").AllReduce(ctx, distributed.F64(l), distributed.Avg)
	_, takeErr, err := t.dpRed.Finish()
	if err == nil {
		err = takeErr
	}
	if err == nil {
		err = wait(ctx, wl)
	}
	if err != nil {
		return 0, fmt.Errorf("layout: rank %d: data-parallel gradient all-reduce: %w", t.mesh.Rank(), err)
	}
	return l[0], nil
}

// ClipGradNorm scales this rank's gradients so that the 2-norm of the
// whole model's gradient is at most maxNorm, and returns that norm before
// scaling, on every rank: optim.ClipGradNorm(params, maxNorm, 2) on the
// unsharded model (scale maxNorm/(norm+1e-6) when below 1). Sharded
// parameters count their shard on every tp rank, replicated ones once per
// stage, the tied embedding once. A non-finite norm leaves the gradients
// unchanged and returns an error wrapping optim.ErrNonFiniteNorm.
func (t *Trainer) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	if t.err != nil {
		return 0, t.err
	}
	if math.IsNaN(maxNorm) || maxNorm < 0 {
		return 0, t.fail(fmt.Errorf("layout: ClipGradNorm: maxNorm = %v, want >= 0", maxNorm))
	}
	var counted []tp.Shard
	for i, s := range t.shards {
		if t.counted[i] {
			counted = append(counted, s)
		}
	}
	sharded, replicated := tp.SumSquares(counted)
	sum := []float64{sharded}
	if t.comm.Rank() == 0 {
		sum[0] += replicated
	}
	for _, dim := range []string{"tp", "pp"} {
		if g := t.mesh.Group(dim); g.Size() > 1 {
			if err := wait(ctx, g.AllReduce(ctx, distributed.F64(sum), distributed.Sum)); err != nil {
				return 0, t.fail(fmt.Errorf("layout: rank %d: ClipGradNorm: %s all-reduce: %w", t.mesh.Rank(), dim, err))
			}
		}
	}
	norm := math.Sqrt(sum[0])
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, fmt.Errorf("layout: ClipGradNorm: gradient 2-norm is %v: %w", norm, optim.ErrNonFiniteNorm)
	}
	tp.ScaleGrads(t.shards, maxNorm/(norm+1e-6))
	return norm, nil
}

// Close releases the pipeline's subgroups (not pg or the mesh's groups,
// which close with pg). Call it once every rank is done.
func (t *Trainer) Close() error {
	if t.err == nil {
		t.err = errors.New("layout: trainer closed")
	}
	return t.pl.Close()
}

// fail breaks the trainer with err and aborts the mesh's groups, so that
// peers waiting on this rank fail promptly instead of at their deadline:
// each group gets a receive that never completes and is closed, which
// makes dist send its peers an abort notice naming this rank. The failure
// spreads along the mesh, as each peer that fails aborts its own groups.
func (t *Trainer) fail(err error) error {
	if t.err != nil {
		return t.err
	}
	t.err = err
	for _, name := range []string{"tp", "pp", "dp"} {
		g := t.mesh.Group(name)
		if g.Size() < 2 {
			continue
		}
		g.Recv(context.Background(), distributed.F32(make([]float32, 1)), (g.Rank()+1)%g.Size(), abortTag)
		g.Close()
	}
	return err
}

// abortTag is the tag of the receive fail leaves pending on each group
// before closing it (no message ever carries it).
const abortTag = 1<<30 - 1

func wait(ctx context.Context, w distributed.Work) error {
	select {
	case <-w.Done():
		return w.Wait()
	case <-ctx.Done():
		return ctx.Err()
	}
}
