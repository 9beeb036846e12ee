package models

import (
	"math/rand/v2"
	"testing"

	"cohort/autograd"
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
		var total float64
		for mb := range M {
			var h *autograd.Var
			for _, st := range stages {
				out, err := st.Forward(mb, h)
				if err != nil {
					t.Fatal(err)
				}
				h = out
			}
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
