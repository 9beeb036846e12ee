package models

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/nn"
)

// Running a GPT as a chain of stages over microbatches gives the loss and
// gradients of GPT.Forward on the whole batch.
func TestGPTStagesMatchForward(t *testing.T) {
	cfg := GPTConfig{Vocab: 32, Ctx: 8, NLayer: 3, D: 16, NHead: 2}
	const B, T, M = 4, 8, 2
	rng := rand.New(rand.NewPCG(1, 2))
	idx := make([]int64, B*T)
	tgt := make([]int64, B*T)
	for i := range idx {
		idx[i], tgt[i] = int64(rng.IntN(cfg.Vocab)), int64(rng.IntN(cfg.Vocab))
	}
	ref, err := NewGPT(rand.New(rand.NewPCG(7, 7)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	loss := ref.Loss(ref.Forward(idx, B, T), tgt)
	autograd.Backward(loss)

	for _, split := range [][]int{{0, 3}, {0, 1, 3}, {0, 1, 2, 3}, {0, 0, 3}} {
		g, _ := NewGPT(rand.New(rand.NewPCG(7, 7)), cfg)
		stages := newStages(t, g, split, idx, tgt, B, T, M)
		var total float64
		for mb := range M {
			h := forwardStages(t, stages, mb)
			total += float64(h.Value.Item()) / M
			g1 := h.Value.Clone()
			g1.Fill(1.0 / M)
			autograd.BackwardGrad(h, g1)
		}
		if d := total - float64(loss.Value.Item()); d > 1e-5 || d < -1e-5 {
			t.Errorf("split %v: loss %v, want %v", split, total, loss.Value.Item())
		}
		want := ref.NamedParameters()
		for i, p := range g.NamedParameters() {
			a, b := p.Param.Grad.Data(), want[i].Param.Grad.Data()
			for j := range a {
				if d := a[j] - b[j]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("split %v: %s grad[%d] = %v, want %v", split, p.Name, j, a[j], b[j])
				}
			}
		}
	}
}

// ForwardThrough gives Forward's logits and gradients, running every
// block once, in order, through its hook.
func TestGPTForwardThrough(t *testing.T) {
	cfg := GPTConfig{Vocab: 32, Ctx: 8, NLayer: 3, D: 16, NHead: 2}
	const B, T = 2, 8
	rng := rand.New(rand.NewPCG(5, 6))
	idx, tgt := make([]int64, B*T), make([]int64, B*T)
	for i := range idx {
		idx[i], tgt[i] = int64(rng.IntN(cfg.Vocab)), int64(rng.IntN(cfg.Vocab))
	}
	ref, _ := NewGPT(rand.New(rand.NewPCG(7, 7)), cfg)
	want := ref.Forward(idx, B, T)
	wantLogits := want.Value.Clone()
	autograd.Backward(ref.Loss(want, tgt))
	g, _ := NewGPT(rand.New(rand.NewPCG(7, 7)), cfg)
	var order []int
	got := g.ForwardThrough(idx, B, T, func(i int, h *autograd.Var, f func(*autograd.Var) *autograd.Var) *autograd.Var {
		order = append(order, i)
		return f(h)
	})
	if len(order) != cfg.NLayer || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Fatalf("blocks run in order %v, want 0 1 2", order)
	}
	a, b := got.Value.Data(), wantLogits.Data()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("logits[%d] = %v, want Forward's %v", i, a[i], b[i])
		}
	}
	autograd.Backward(g.Loss(got, tgt))
	wp := ref.NamedParameters()
	for i, p := range g.NamedParameters() {
		a, b := p.Param.Grad.Data(), wp[i].Param.Grad.Data()
		for j := range a {
			if a[j] != b[j] {
				t.Fatalf("%s grad[%d] = %v, want Forward's %v", p.Name, j, a[j], b[j])
			}
		}
	}
}

func TestGPTStageErrors(t *testing.T) {
	g, _ := NewGPT(rand.New(rand.NewPCG(1, 1)), GPTConfig{Vocab: 8, Ctx: 4, NLayer: 2, D: 8, NHead: 2})
	if _, err := g.NewStage(1, 3, false, true); err == nil {
		t.Error("NewStage(1, 3) of 2 blocks: no error")
	}
	s, _ := g.NewStage(0, 2, true, true)
	if err := s.SetBatch(make([]int64, 12), make([]int64, 12), 3, 4, 2); err == nil {
		t.Error("SetBatch with 2 microbatches of a batch of 3: no error")
	}
	if _, err := s.Forward(0, nil); err == nil {
		t.Error("Forward before SetBatch: no error")
	}
}

// A steady-state training step reuses last step's activations and
// gradients (tensor.Recycle): beyond the parameters' gradients, which
// ZeroGrad drops and backward allocates again, it allocates a small part
// of what the first step, which has nothing to reuse, allocates. Before
// the residual's gradient was handed over (autograd's lend), the
// embeddings' and the head's outputs were marked Transient and the free
// list kept more than 16 buffers of a size, that part was 19 % through
// GPT.Forward and 39 % through the stages; now it is under 1 %.
func TestGPTStepReusesMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	g, err := NewGPT(rng, GPTMini())
	if err != nil {
		t.Fatal(err)
	}
	var paramBytes uint64
	for _, p := range nn.Parameters(g) {
		paramBytes += 4 * uint64(p.Value.Len())
	}
	const B, T, M = 32, 64, 2
	idx, tgt := make([]int64, B*T), make([]int64, B*T)
	for i := range idx {
		idx[i], tgt[i] = int64(rng.IntN(256)), int64(rng.IntN(256))
	}
	stages := newStages(t, g, []int{0, 2, 4}, idx, tgt, B, T, M)
	for _, tc := range []struct {
		name string
		step func()
	}{
		{"Forward", func() { autograd.Backward(g.Loss(g.Forward(idx, B, T), tgt)) }},
		{"ForwardThrough", func() {
			autograd.Backward(g.Loss(g.ForwardThrough(idx, B, T, func(_ int, h *autograd.Var, f func(*autograd.Var) *autograd.Var) *autograd.Var { return f(h) }), tgt))
		}},
		{"stages", func() {
			for mb := range M {
				autograd.Backward(forwardStages(t, stages, mb))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allocated := func(n int) uint64 {
				var a, b runtime.MemStats
				runtime.ReadMemStats(&a)
				for range n {
					nn.ZeroGrad(g)
					tc.step()
				}
				runtime.ReadMemStats(&b)
				return (b.TotalAlloc - a.TotalAlloc) / uint64(n)
			}
			first := allocated(1)
			allocated(2)
			steady := allocated(3)
			t.Logf("first step %d KiB, steady state %d KiB per step, of which parameter gradients %d KiB", first>>10, steady>>10, paramBytes>>10)
			if steady > paramBytes+first/8 {
				t.Errorf("a steady-state step allocates %d KiB: more than the %d KiB of parameter gradients and an eighth of the first step's %d KiB", steady>>10, paramBytes>>10, first>>10)
			}
		})
	}
}

// newStages cuts g into stages at the block indices of split (stage s
// runs blocks [split[s], split[s+1])) and gives each the batch.
func newStages(t *testing.T, g *GPT, split []int, idx, tgt []int64, B, T, M int) []*GPTStage {
	t.Helper()
	var stages []*GPTStage
	for s := 0; s+1 < len(split); s++ {
		st, err := g.NewStage(split[s], split[s+1], s == 0, s+2 == len(split))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SetBatch(idx, tgt, B, T, M); err != nil {
			t.Fatal(err)
		}
		stages = append(stages, st)
	}
	return stages
}

// forwardStages runs microbatch mb through the stages in turn and returns
// the last one's output, the loss.
func forwardStages(t *testing.T, stages []*GPTStage, mb int) *autograd.Var {
	t.Helper()
	var h *autograd.Var
	for _, st := range stages {
		out, err := st.Forward(mb, h)
		if err != nil {
			t.Fatal(err)
		}
		h = out
	}
	return h
}
