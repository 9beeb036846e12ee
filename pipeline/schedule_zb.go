package pipeline

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the
// backward pass is split into BackwardInput (B, the gradient the previous
// stage waits for) and BackwardWeight (W, which nobody waits for). The
// order is 1F1B's with B in place of the whole backward, except that rank r
// keeps up to r weight passes pending and runs them later, where 1F1B
// would sit idle at the end of the step. Rank r then holds at most P
// microbatches' activations (the peak of 1F1B's rank 0), and with equal F,
// B and W costs the idle time per rank drops from (P−1)·(F+B+W) to
// (P−1)·(F+B−W), a third of 1F1B's.
func zbh1Order(stages, microbatches int) [][]Action {
	out := make([][]Action, stages)
	for r := range out {
		warmup := min(stages-1-r, microbatches)
		var l []Action
		nextW := 0 // oldest microbatch whose W is pending
		nextB := 0
		backward := func() {
			l = append(l, compute(BackwardInput, r, nextB))
			nextB++
			for nextB-nextW > r {
				l = append(l, compute(BackwardWeight, r, nextW))
				nextW++
			}
		}
		for m := range warmup {
			l = append(l, compute(Forward, r, m))
		}
		for i := range microbatches - warmup {
			l = append(l, compute(Forward, r, warmup+i))
			backward()
		}
		for nextB < microbatches {
			backward()
		}
		for ; nextW < microbatches; nextW++ {
			l = append(l, compute(BackwardWeight, r, nextW))
		}
		out[r] = l
	}
	return out
}
