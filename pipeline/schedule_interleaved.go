package pipeline

// Interleaved 1F1B (Narayanan et al., "Efficient Large-Scale Language Model
// Training on GPU Clusters Using Megatron-LM", SC 2021): each rank holds
// Virtual non-adjacent chunks of the model (stage s on rank s mod P), so a
// microbatch visits every rank Virtual times and the bubble shrinks by that
// factor, to (P−1)/(V·M+P−1) with unit costs, at the price of V times more
// messages.
//
// Microbatches go through in groups of P: a rank's k-th forward is chunk
// (k/P) mod V of microbatch (k/(P·V))·P + k mod P, and its k-th backward the
// same microbatch on chunk V−1−(k/P) mod V. Rank r warms up with
// 2·(P−1−r) + (V−1)·P forwards, then alternates, then drains. The number of
// microbatches must be a multiple of P.
func interleavedOrder(stages, virtual, microbatches int) [][]Action {
	p, v := stages, virtual
	total := microbatches * v
	at := func(r, k int, backward bool) Action {
		chunk := (k / p) % v
		kind := Forward
		if backward {
			chunk = v - 1 - chunk
			kind = Backward
		}
		mb := (k/(p*v))*p + k%p
		return compute(kind, chunk*p+r, mb)
	}
	out := make([][]Action, stages)
	for r := range out {
		warmup := min(2*(p-1-r)+(v-1)*p, total)
		var l []Action
		for k := range warmup {
			l = append(l, at(r, k, false))
		}
		for k := range total - warmup {
			l = append(l, at(r, warmup+k, false), at(r, k, true))
		}
		for k := total - warmup; k < total; k++ {
			l = append(l, at(r, k, true))
		}
		out[r] = l
	}
	return out
}
