package pipeline

// 1F1B (Narayanan et al., "PipeDream: Generalized Pipeline Parallelism for
// DNN Training", SOSP 2019; the flush variant of Megatron-LM): rank r runs
// P−1−r warm-up forwards, then alternates one forward and one backward, then
// drains the remaining backwards. The bubble is GPipe's, (P−1)/(M+P−1), but
// rank r holds at most P−r microbatches' activations instead of M.
func oneF1BOrder(stages, microbatches int) [][]Action {
	out := make([][]Action, stages)
	for r := range out {
		warmup := min(stages-1-r, microbatches)
		var l []Action
		for m := range warmup {
			l = append(l, compute(Forward, r, m))
		}
		for i := range microbatches - warmup {
			l = append(l, compute(Forward, r, warmup+i), compute(Backward, r, i))
		}
		for m := microbatches - warmup; m < microbatches; m++ {
			l = append(l, compute(Backward, r, m))
		}
		out[r] = l
	}
	return out
}
