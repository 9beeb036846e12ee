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
//
// A weight pass is worth deferring only to fill the idle time at the end
// of the step: one deferred in mid-step reads its saved activations and
// output gradient back from memory after other microbatches have pushed
// them out of cache (GPT-mini's last stage, in one process: 1.035× the
// time of W right after I, 40 alternated runs), and gains nothing, since
// 1F1B's steady state has no idle time to fill. So every weight pass that
// the plan above would run before the rank's last forward runs right after
// its input pass instead; only the ones after the last forward stay
// deferred. The simulator finds the same step time and peak memory either
// way, for equal and unequal costs alike (TestZBH1HoistedWeights).
func zbh1Order(stages, microbatches int) [][]Action {
	return hoistWeights(zbh1Deferred(stages, microbatches))
}

// zbh1Deferred is ZB-H1's order with every rank r keeping up to r weight
// passes pending throughout the step.
func zbh1Deferred(stages, microbatches int) [][]Action {
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

// hoistWeights moves, on each rank, every weight pass that comes before the
// rank's last forward to right after the input pass of its microbatch.
func hoistWeights(order [][]Action) [][]Action {
	out := make([][]Action, len(order))
	for r, acts := range order {
		lastF := -1
		for i, a := range acts {
			if a.Kind == Forward {
				lastF = i
			}
		}
		early := map[int]bool{} // microbatches whose W moves
		for i, a := range acts {
			if a.Kind == BackwardWeight && i < lastF {
				early[a.Microbatch] = true
			}
		}
		l := make([]Action, 0, len(acts))
		for _, a := range acts {
			if a.Kind == BackwardWeight && early[a.Microbatch] {
				continue
			}
			l = append(l, a)
			if a.Kind == BackwardInput && early[a.Microbatch] {
				l = append(l, compute(BackwardWeight, a.Stage, a.Microbatch))
			}
		}
		out[r] = l
	}
	return out
}
