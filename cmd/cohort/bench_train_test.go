package main

import (
	"context"
	"math"
	"testing"
)

func TestTrainRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the 60000-sample synthetic dataset")
	}
	for _, model := range []string{"mlp", "cnn"} {
		t.Run(model, func(t *testing.T) {
			r, err := trainRun(context.Background(), model, 1, 3, "")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int{"mlp": 1863690, "cnn": 61706}[model]
			if r.params != want {
				t.Errorf("%d parameters, want %d (the anchor model)", r.params, want)
			}
			if r.wall <= 0 || r.data < 0 || r.data > r.wall {
				t.Errorf("wall %v, data %v: want 0 < data ≤ wall", r.wall, r.data)
			}
			// Untrained 10-way classification: the loss starts near ln 10.
			if l := float64(r.lastLoss); math.IsNaN(l) || math.Abs(l-math.Log(10)) > 0.5 {
				t.Errorf("loss after 4 steps %v, want about ln 10 = 2.30", l)
			}
		})
	}
}

func TestBenchTrainFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown model":  {"--model", "resnet"},
		"zero threads":   {"--threads", "0"},
		"zero steps":     {"--steps", "0"},
		"negative warm":  {"--warmup", "-1"},
		"stray argument": {"extra"},
		"unknown flag":   {"--bogus"},
	} {
		t.Run(name, func(t *testing.T) {
			if code := benchTrain(args); code != 2 {
				t.Errorf("benchTrain(%q) = %d, want 2 (usage error)", args, code)
			}
		})
	}
}

func TestBenchGemmFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"bad threads":    {"--threads", "1,x"},
		"zero threads":   {"--threads", "0"},
		"unknown shape":  {"--shapes", "128^3,nope"},
		"stray argument": {"extra"},
	} {
		t.Run(name, func(t *testing.T) {
			if code := benchGemm(args); code != 2 {
				t.Errorf("benchGemm(%q) = %d, want 2 (usage error)", args, code)
			}
		})
	}
}
