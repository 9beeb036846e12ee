package pipeline

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

var _ Stage = (*models.GPTStage)(nil)

// trainCfg is one GPT-mini training run: a batch of batch sequences of
// length seqLen per step, AdamW with clipping at 1.0.
type trainCfg struct {
	schedule     string
	stages       int // ranks
	virtual      int
	microbatches int
	recompute    bool
	steps        int
	batch        int
	seqLen       int
}

func (c trainCfg) String() string {
	s := fmt.Sprintf("%s/p=%d/v=%d/m=%d/steps=%d", c.schedule, c.stages, c.virtual, c.microbatches, c.steps)
	if c.recompute {
		s += "/recompute"
	}
	return s
}

// batchFor returns step's token ids and targets (a fixed random stream).
func batchFor(step, n, vocab int) (idx, tgt []int64) {
	rng := rand.New(rand.NewPCG(uint64(step), 99))
	idx, tgt = make([]int64, n), make([]int64, n)
	for i := range idx {
		idx[i] = int64(rng.IntN(vocab))
		tgt[i] = int64((int(idx[i])*7 + 3) % vocab) // learnable: the next token is a function of this one
	}
	return idx, tgt
}

func newAdamW(params []*autograd.Var) *optim.Adam {
	opt, err := optim.NewAdamW([]optim.Group{{Params: params, LR: 1e-3, WeightDecay: 0.1}}, optim.AdamDefaults())
	if err != nil {
		panic(err)
	}
	return opt
}

func newGPT(t testing.TB, cfg models.GPTConfig) *models.GPT {
	g, err := models.NewGPT(rand.New(rand.NewPCG(5, 6)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// reference trains GPT-mini in one process and returns its final
// parameters by name and the losses.
func reference(t testing.TB, c trainCfg) (map[string][]float32, []float64) {
	g := newGPT(t, models.GPTMini())
	init := map[string][]float32{}
	for _, p := range g.NamedParameters() {
		init[p.Name] = p.Param.Value.Clone().Data()
	}
	params := nn.Parameters(g)
	opt := newAdamW(params)
	var losses []float64
	for step := range c.steps {
		idx, tgt := batchFor(step, c.batch*c.seqLen, g.Config.Vocab)
		nn.ZeroGrad(g)
		// The gradient of the mean loss, accumulated over the step's
		// microbatches in order (rows i·batch/m … of the batch), as the
		// stages compute it.
		m := max(c.microbatches, 1)
		n := c.batch / m * c.seqLen
		var loss float64
		for i := range m {
			l := g.Loss(g.Forward(idx[i*n:(i+1)*n], c.batch/m, c.seqLen), tgt[i*n:(i+1)*n])
			autograd.BackwardGrad(l, tensor.Full(float32(1/float64(m))).Reshape(l.Value.Shape()...))
			loss += float64(l.Value.Item())
		}
		if _, err := optim.ClipGradNorm(params, 1.0, 2); err != nil {
			t.Fatal(err)
		}
		opt.Step()
		losses = append(losses, loss/float64(m))
	}
	out := map[string][]float32{}
	moved := 0.0
	for _, p := range g.NamedParameters() {
		out[p.Name] = p.Param.Value.Clone().Data()
		for i, v := range out[p.Name] {
			moved = max(moved, math.Abs(float64(v-init[p.Name][i])))
		}
	}
	if moved < 1e-3 {
		t.Fatalf("reference training moved no parameter by more than %v", moved)
	}
	return out, losses
}

// rankRun is one rank's part of a pipelined run.
type rankRun struct {
	params map[string][]float32
	losses []float64
}

// trainRank trains this rank's stages of GPT-mini under the pipeline.
func trainRank(ctx context.Context, pg distributed.ProcessGroup, c trainCfg) (rankRun, error) {
	g, err := models.NewGPT(rand.New(rand.NewPCG(5, 6)), models.GPTMini())
	if err != nil {
		return rankRun{}, err
	}
	sched, err := NewSchedule(c.schedule, c.stages, c.virtual, c.microbatches)
	if err != nil {
		return rankRun{}, err
	}
	split, err := Uniform(g.Config.NLayer, sched.NumStages())
	if err != nil {
		return rankRun{}, err
	}
	mbSize, err := MicrobatchSize(c.batch, c.microbatches)
	if err != nil {
		return rankRun{}, err
	}
	r := pg.Rank()
	var stages []Stage
	var gs []*models.GPTStage
	var named []nn.NamedParameter
	seen := map[*autograd.Var]bool{}
	for chunk := range sched.Virtual {
		s := chunk*sched.Stages + r
		st, err := g.NewStage(split[s], split[s+1], s == 0, s == sched.NumStages()-1)
		if err != nil {
			return rankRun{}, err
		}
		stages, gs = append(stages, st), append(gs, st)
		for _, p := range st.NamedParameters() {
			if !seen[p.Param] {
				seen[p.Param] = true
				named = append(named, p)
			}
		}
	}
	var tied []*autograd.Var
	if r == sched.RankOf(0) || r == sched.RankOf(sched.NumStages()-1) {
		tied = []*autograd.Var{g.Wte}
	}
	pl, err := New(ctx, pg, sched, stages, Options{
		Shape: []int{mbSize, c.seqLen, g.Config.D}, Recompute: c.recompute, Tied: tied, Split: split,
	})
	if err != nil {
		return rankRun{}, err
	}
	defer pl.Close()
	var params []*autograd.Var
	for _, p := range named {
		params = append(params, p.Param)
	}
	opt := newAdamW(params)
	var run rankRun
	for step := range c.steps {
		idx, tgt := batchFor(step, c.batch*c.seqLen, g.Config.Vocab)
		for _, st := range gs {
			if err := st.SetBatch(idx, tgt, c.batch, c.seqLen, c.microbatches); err != nil {
				return run, err
			}
		}
		for _, p := range params {
			p.ZeroGrad()
		}
		loss, err := pl.Step(ctx)
		if err != nil {
			return run, err
		}
		if _, err := pl.ClipGradNorm(ctx, params, 1.0); err != nil {
			return run, err
		}
		opt.Step()
		run.losses = append(run.losses, loss)
	}
	if st := pl.Stats(); st.Steps != c.steps || st.Compute <= 0 || st.Compute > st.Wall {
		return run, fmt.Errorf("stats %+v after %d steps: want that many steps and 0 < compute ≤ wall", st, c.steps)
	}
	run.params = map[string][]float32{}
	for _, p := range named {
		run.params[p.Name] = p.Param.Value.Clone().Data()
	}
	return run, nil
}

// compare checks the pipelined runs against the reference.
func compare(t *testing.T, ref map[string][]float32, refLoss []float64, runs []rankRun) {
	t.Helper()
	covered := map[string]bool{}
	for r, run := range runs {
		if len(run.losses) != len(refLoss) {
			t.Fatalf("rank %d: %d losses, want %d", r, len(run.losses), len(refLoss))
		}
		for i, l := range run.losses {
			if math.Abs(l-refLoss[i]) > 1e-4*math.Max(1, math.Abs(refLoss[i])) {
				t.Errorf("rank %d step %d: loss %v, want %v", r, i, l, refLoss[i])
			}
		}
		for name, got := range run.params {
			covered[name] = true
			want := ref[name]
			for i := range got {
				if d := math.Abs(float64(got[i] - want[i])); d > 2e-6+1e-5*math.Abs(float64(want[i])) {
					t.Fatalf("rank %d: %s[%d] = %v, want %v", r, name, i, got[i], want[i])
				}
			}
		}
	}
	if len(covered) != len(ref) {
		t.Errorf("%d of %d parameters held by some rank", len(covered), len(ref))
	}
}

func runPipelined(t *testing.T, c trainCfg) []rankRun {
	t.Helper()
	runs := make([]rankRun, c.stages)
	distributedtest.Run(t, c.stages, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, time.Minute)
		run, err := trainRank(ctx, pg, c)
		if err != nil {
			t.Errorf("rank %d: %v", pg.Rank(), err)
			return
		}
		runs[pg.Rank()] = run
	})
	return runs
}

// Training GPT-mini on two stages with every schedule, for 20 steps,
// equals training it in one process, to float32 rounding: losses and
// final parameters. A few more layouts run 3 steps.
//
// The one process accumulates the gradient over the same microbatches.
// Against a single full-batch pass the parameters reach 0.45–0.77 of a
// bound ten times as loose (depending on the GEMM kernels): the
// weight-gradient GEMMs sum over other lengths, and AdamW's normalised
// update turns those rounding differences in small gradients into
// differences of order lr·1e-2 over 20 steps. With the same microbatches
// what is left (the order of accumulation, the tied gradient's sum, the
// norm's sum) reaches about a tenth of this bound.
func TestGPTMiniEqualsOneProcess(t *testing.T) {
	base := trainCfg{stages: 2, virtual: 1, microbatches: 4, steps: 20, batch: 4, seqLen: 16}
	var cfgs []trainCfg
	for _, name := range Names() {
		c := base
		c.schedule = name
		if name == "interleaved" {
			c.virtual = 2
		}
		cfgs = append(cfgs, c)
	}
	short := base
	short.steps, short.batch = 3, 8
	rec := short
	rec.schedule, rec.recompute = "zb", true
	rec1 := short
	rec1.schedule, rec1.recompute = "1f1b", true
	one := short
	one.schedule, one.stages = "1f1b", 1
	local := short // one rank, two virtual stages: data passes locally
	local.schedule, local.stages, local.virtual = "interleaved", 1, 2
	four := short
	four.schedule, four.stages = "gpipe", 4
	eight := short // more microbatches than 1F1B's warm-up, two per microbatch
	eight.schedule, eight.microbatches = "zb", 8
	cfgs = append(cfgs, rec, rec1, one, local, four, eight)
	type refRun struct {
		params map[string][]float32
		losses []float64
	}
	refs := map[[3]int]refRun{} // by steps, batch and microbatches
	for _, c := range cfgs {
		t.Run(c.String(), func(t *testing.T) {
			key := [3]int{c.steps, c.batch, c.microbatches}
			ref, ok := refs[key]
			if !ok {
				ref.params, ref.losses = reference(t, c)
				refs[key] = ref
			}
			runs := runPipelined(t, c)
			if t.Failed() {
				return
			}
			compare(t, ref.params, ref.losses, runs)
		})
	}
}

// Options.StageDone fires once per step for each stage a rank holds, when
// that stage's gradients are final: a snapshot taken in the hook equals
// the gradients after Step (the tied embedding aside, summed at the end).
// With virtual stages the later stage is done first.
func TestStageDone(t *testing.T) {
	for _, name := range []string{"gpipe", "1f1b", "zb", "interleaved"} {
		t.Run(name, func(t *testing.T) {
			s, err := NewSchedule(name, 2, 0, 4)
			if err != nil {
				t.Fatal(err)
			}
			distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, 30*time.Second)
				stages, opts := tinyRank(t, pg, s, func(st Stage) Stage { return st })
				var order []int
				snaps := map[int][][]float32{}
				byStage := map[int]Stage{}
				for c, st := range stages {
					byStage[c*s.Stages+pg.Rank()] = st
				}
				opts.StageDone = func(stage int) {
					order = append(order, stage)
					var snap [][]float32
					for _, v := range byStage[stage].Parameters() {
						if v.Grad == nil {
							snap = append(snap, nil)
						} else {
							snap = append(snap, v.Grad.Clone().Data())
						}
					}
					snaps[stage] = snap
				}
				pl, err := New(ctx, pg, s, stages, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer pl.Close()
				for step := range 2 {
					order = order[:0]
					for _, st := range stages {
						for _, v := range st.Parameters() {
							v.ZeroGrad()
						}
					}
					if _, err := pl.Step(ctx); err != nil {
						t.Fatal(err)
					}
					want := []int{}
					for c := s.Virtual - 1; c >= 0; c-- {
						want = append(want, c*s.Stages+pg.Rank())
					}
					if !slices.Equal(order, want) {
						t.Errorf("rank %d step %d: StageDone for stages %v, want %v", pg.Rank(), step, order, want)
					}
					for stage, snap := range snaps {
						for i, v := range byStage[stage].Parameters() {
							if v.Value.Len() == tinyGPT.Vocab*tinyGPT.D && (stage == 0 || stage == s.NumStages()-1) {
								continue // the tied embedding
							}
							if v.Grad == nil || !slices.Equal(snap[i], v.Grad.Data()) {
								t.Errorf("rank %d step %d: stage %d parameter %d changed after StageDone", pg.Rank(), step, stage, i)
							}
						}
					}
				}
			})
		})
	}
}

// TestAccumulateAcrossSteps: two Steps without zeroing in between leave
// every gradient, the tied embedding's included, equal to the sum of the
// two Steps' gradients taken apart (gradient accumulation over steps, as
// autograd accumulates), not the earlier step's tied gradient summed
// twice.
func TestAccumulateAcrossSteps(t *testing.T) {
	const batch, seqLen, mbs = 4, 16, 4
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, time.Minute)
		g, err := models.NewGPT(rand.New(rand.NewPCG(5, 6)), models.GPTMini())
		if err != nil {
			t.Fatal(err)
		}
		sched, err := NewSchedule("1f1b", 2, 1, mbs)
		if err != nil {
			t.Fatal(err)
		}
		split, err := Uniform(g.Config.NLayer, 2)
		if err != nil {
			t.Fatal(err)
		}
		r := pg.Rank()
		st, err := g.NewStage(split[r], split[r+1], r == 0, r == 1)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := New(ctx, pg, sched, []Stage{st}, Options{
			Shape: []int{batch / mbs, seqLen, g.Config.D}, Tied: []*autograd.Var{g.Wte}, Split: split,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer pl.Close()
		params := st.NamedParameters()
		zero := func() {
			for _, p := range params {
				p.Param.ZeroGrad()
			}
		}
		step := func(s int) {
			idx, tgt := batchFor(s, batch*seqLen, g.Config.Vocab)
			if err := st.SetBatch(idx, tgt, batch, seqLen, mbs); err != nil {
				t.Fatal(err)
			}
			if _, err := pl.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
		grads := func() [][]float32 {
			var out [][]float32
			for _, p := range params {
				out = append(out, slices.Clone(p.Param.Grad.Data()))
			}
			return out
		}
		zero()
		step(0)
		g0 := grads()
		zero()
		step(1)
		g1 := grads()
		zero()
		step(0)
		step(1)
		got := grads()
		for i, p := range params {
			for j := range got[i] {
				want := g0[i][j] + g1[i][j]
				if d := math.Abs(float64(got[i][j] - want)); d > 1e-6+1e-4*math.Abs(float64(want)) {
					t.Fatalf("rank %d: %s[%d]: %v after two steps, want %v + %v", r, p.Name, j, got[i][j], g0[i][j], g1[i][j])
				}
			}
		}
	})
}
