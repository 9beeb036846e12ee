package pipeline

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestUniform(t *testing.T) {
	cases := []struct {
		layers, stages int
		want           []int
	}{
		{4, 1, []int{0, 4}},
		{4, 2, []int{0, 2, 4}},
		{4, 4, []int{0, 1, 2, 3, 4}},
		{10, 4, []int{0, 3, 6, 8, 10}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("layers=%d/stages=%d", c.layers, c.stages), func(t *testing.T) {
			got, err := Uniform(c.layers, c.stages)
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
			if err := CheckSplit(c.layers, got); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestCheckSplit(t *testing.T) {
	for _, b := range [][]int{{0}, {1, 4}, {0, 3}, {0, 2, 2, 4}, {0, 3, 2, 4}} {
		if err := CheckSplit(4, b); err == nil {
			t.Errorf("CheckSplit(4, %v): no error", b)
		}
	}
}

// stageMax returns the cost of the most expensive stage of a split.
func stageMax(costs []float64, b []int) float64 {
	m := 0.0
	for s := 0; s+1 < len(b); s++ {
		var c float64
		for _, x := range costs[b[s]:b[s+1]] {
			c += x
		}
		m = max(m, c)
	}
	return m
}

// bruteBest tries every split.
func bruteBest(costs []float64, stages int) float64 {
	best := math.Inf(1)
	var rec func(b []int)
	rec = func(b []int) {
		if len(b) == stages {
			best = min(best, stageMax(costs, append(b, len(costs))))
			return
		}
		for j := b[len(b)-1] + 1; j <= len(costs)-(stages-len(b)); j++ {
			rec(append(slices.Clone(b), j))
		}
	}
	rec([]int{0})
	return best
}

func TestBalance(t *testing.T) {
	cases := []struct {
		costs  []float64
		stages int
		want   []int
	}{
		{[]float64{1, 1, 1, 1}, 2, []int{0, 2, 4}},
		{[]float64{3, 1, 1, 1}, 2, []int{0, 1, 4}},
		{[]float64{1, 1, 1, 3}, 2, []int{0, 3, 4}},
		{[]float64{2, 1, 1, 1, 1, 2}, 3, []int{0, 2, 5, 6}}, // ties: earlier stages take more
		{[]float64{5}, 1, []int{0, 1}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.costs, c.stages), func(t *testing.T) {
			got, err := Balance(c.costs, c.stages)
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
	// Optimal against brute force on random costs.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		n := 1 + rng.IntN(9)
		stages := 1 + rng.IntN(n)
		costs := make([]float64, n)
		for j := range costs {
			costs[j] = float64(rng.IntN(10))
		}
		got, err := Balance(costs, stages)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckSplit(n, got); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if g, w := stageMax(costs, got), bruteBest(costs, stages); g != w {
			t.Fatalf("case %d: costs %v stages %d: split %v has max %v, best is %v", i, costs, stages, got, g, w)
		}
	}
	if _, err := Balance([]float64{1, math.NaN()}, 1); err == nil {
		t.Error("NaN cost: no error")
	}
}
