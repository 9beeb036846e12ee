package pipeline

import (
	"fmt"
	"math"
)

// A split of n layers into stages is a list of stages+1 bounds
// 0 = b[0] < b[1] < … < b[stages] = n: stage s runs layers [b[s], b[s+1]).

// Uniform splits layers into stages of sizes differing by at most one,
// the larger ones first.
func Uniform(layers, stages int) ([]int, error) {
	if err := checkCounts(layers, stages); err != nil {
		return nil, err
	}
	b := make([]int, stages+1)
	for s := range stages {
		size := layers / stages
		if s < layers%stages {
			size++
		}
		b[s+1] = b[s] + size
	}
	return b, nil
}

// CheckSplit reports whether bounds is a valid split of layers into
// len(bounds)−1 stages.
func CheckSplit(layers int, bounds []int) error {
	if len(bounds) < 2 {
		return fmt.Errorf("pipeline: split %v: want at least one stage (two bounds)", bounds)
	}
	if err := checkCounts(layers, len(bounds)-1); err != nil {
		return err
	}
	if bounds[0] != 0 || bounds[len(bounds)-1] != layers {
		return fmt.Errorf("pipeline: split %v of %d layers must start at 0 and end at %d", bounds, layers, layers)
	}
	for s := 0; s+1 < len(bounds); s++ {
		if bounds[s+1] <= bounds[s] {
			return fmt.Errorf("pipeline: split %v: stage %d has no layers", bounds, s)
		}
	}
	return nil
}

// Balance splits layers with the given costs (e.g. measured times) into
// stages contiguous stages so that the most expensive stage is as cheap as
// possible; every stage gets at least one layer. Among the best splits it
// returns the one whose stage costs are lexicographically smallest from
// the last stage backwards (earlier stages take more), which makes the
// result deterministic.
func Balance(costs []float64, stages int) ([]int, error) {
	n := len(costs)
	if err := checkCounts(n, stages); err != nil {
		return nil, err
	}
	for i, c := range costs {
		if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			return nil, fmt.Errorf("pipeline: Balance: layer %d cost %v, want finite and >= 0", i, c)
		}
	}
	prefix := make([]float64, n+1)
	for i, c := range costs {
		prefix[i+1] = prefix[i] + c
	}
	// best[s][i]: the smallest possible largest stage cost when layers
	// [i, n) go to the last s stages; cut[s][i] the end of the first of them.
	inf := math.Inf(1)
	best := make([][]float64, stages+1)
	cut := make([][]int, stages+1)
	for s := range best {
		best[s] = make([]float64, n+1)
		cut[s] = make([]int, n+1)
		for i := range best[s] {
			best[s][i] = inf
		}
	}
	best[0][n] = 0
	for s := 1; s <= stages; s++ {
		for i := n - s; i >= 0; i-- {
			// Try the longest first stage first: ties keep it (earlier
			// stages take more).
			for j := n - s + 1; j > i; j-- {
				c := max(prefix[j]-prefix[i], best[s-1][j])
				if c < best[s][i] {
					best[s][i], cut[s][i] = c, j
				}
			}
		}
	}
	b := []int{0}
	for s, i := stages, 0; s > 0; s-- {
		i = cut[s][i]
		b = append(b, i)
	}
	return b, nil
}

func checkCounts(layers, stages int) error {
	switch {
	case stages < 1:
		return fmt.Errorf("pipeline: %d stages, want at least 1", stages)
	case stages > layers:
		return fmt.Errorf("pipeline: %d stages for %d layers: every stage needs at least one layer", stages, layers)
	}
	return nil
}

// MicrobatchSize returns batch/microbatches, or an error when the
// microbatches do not divide the batch.
func MicrobatchSize(batch, microbatches int) (int, error) {
	if microbatches < 1 || batch < 1 || batch%microbatches != 0 {
		return 0, fmt.Errorf("pipeline: %d microbatches do not divide a batch of %d", microbatches, batch)
	}
	return batch / microbatches, nil
}
