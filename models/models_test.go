package models

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

func TestParameterCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gpt, err := NewGPT(rng, GPTMini())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		m       nn.Module
		params  int
		tensors int
	}{
		{"mlp", MLP(rng), 1863690, 6},
		{"lenet", LeNet(rng), 61706, 10},
		{"gpt_mini", gpt, 834304, 52},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := nn.NumParameters(tc.m); n != tc.params {
				t.Errorf("%d parameters, want %d (the PyTorch anchor)", n, tc.params)
			}
			if n := len(tc.m.NamedParameters()); n != tc.tensors {
				t.Errorf("%d parameter tensors, want %d", n, tc.tensors)
			}
		})
	}
}

func TestForwardShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	x := tensor.New(2, 1, 28, 28)
	x.FillNormal(rng, 0, 1)
	if s := LeNet(rng).Forward(autograd.NewVar(x, false)).Value.Shape(); s[0] != 2 || s[1] != 10 {
		t.Errorf("LeNet output shape %v, want [2 10]", s)
	}
	if s := MLP(rng).Forward(autograd.NewVar(x.Reshape(2, 784), false)).Value.Shape(); s[0] != 2 || s[1] != 10 {
		t.Errorf("MLP output shape %v, want [2 10]", s)
	}
	cfg := GPTConfig{Vocab: 11, Ctx: 6, NLayer: 2, D: 8, NHead: 2}
	g, err := NewGPT(rng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	idx := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	logits := g.Forward(idx, 2, 4)
	if s := logits.Value.Shape(); s[0] != 2 || s[1] != 4 || s[2] != 11 {
		t.Fatalf("GPT logits shape %v, want [2 4 11]", s)
	}
	// An untrained model with small weights predicts nearly uniformly.
	loss := g.Loss(logits, idx).Value.Item()
	if math.Abs(float64(loss)-math.Log(11)) > 0.2 {
		t.Errorf("initial loss %g, want about ln 11 = %g", loss, math.Log(11))
	}
	if _, err := NewGPT(rng, GPTConfig{Vocab: 11, Ctx: 6, NLayer: 1, D: 9, NHead: 2}); err == nil {
		t.Errorf("width 9 with 2 heads accepted")
	}
}

// TestGPTNumParams checks the configuration's count against the built
// models' and GPT-2 small's published 124,439,808 (head tied to wte).
func TestGPTNumParams(t *testing.T) {
	if n := GPT2().NumParams(); n != 124439808 {
		t.Errorf("GPT2().NumParams() = %d, want 124439808", n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []GPTConfig{GPTMini(), {Vocab: 50, Ctx: 8, NLayer: 2, D: 64, NHead: 2}, {Vocab: 7, Ctx: 3, NLayer: 0, D: 4, NHead: 1}} {
		g, err := NewGPT(rng, c)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := nn.NumParameters(g), c.NumParams(); got != want {
			t.Errorf("%+v: built %d parameters, NumParams says %d", c, got, want)
		}
	}
	if testing.Short() {
		t.Skip("-short: not building GPT-2 small (500 MB)")
	}
	g, err := NewGPT(rng, GPT2())
	if err != nil {
		t.Fatal(err)
	}
	if n := nn.NumParameters(g); n != 124439808 {
		t.Errorf("GPT-2 small built with %d parameters, want 124439808", n)
	}
	if n := len(g.NamedParameters()); n != 2+12*12+2 {
		t.Errorf("GPT-2 small has %d parameter tensors, want 148", n)
	}
}
