package pipeline

// GPipe (Huang et al., "GPipe: Efficient Training of Giant Neural Networks
// using Pipeline Parallelism", NeurIPS 2019): every rank runs the forward
// pass of all microbatches, then their backward passes. Simple, but every
// microbatch's activations are alive at once (peak M per rank), and the
// bubble is (P−1)/(M+P−1) of the step.
func gpipeOrder(stages, microbatches int) [][]Action {
	out := make([][]Action, stages)
	for r := range out {
		for m := range microbatches {
			out[r] = append(out[r], compute(Forward, r, m))
		}
		for m := range microbatches {
			out[r] = append(out[r], compute(Backward, r, m))
		}
	}
	return out
}
