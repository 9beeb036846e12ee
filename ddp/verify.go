package ddp

import (
	"context"
	"fmt"
	"math"
	"strings"

	"cohort/dist"
)

// VerifyReplicas checks that every rank's parameters are bit-for-bit equal
// to rank 0's, by exchanging one 64-bit hash per parameter (an all-gather
// of 8·len(parameters) bytes per rank; hashing reads every parameter
// once). Every rank must call it at the same point, between steps. It
// returns an error naming each rank and the first parameter that diverged,
// the symptom of a rank that skipped a step, a nondeterministic kernel, or
// memory corruption. Buffers are not compared: BatchNorm statistics are
// per-rank by design.
func (m *Model) VerifyReplicas(ctx context.Context) error {
	if err := m.usable("VerifyReplicas"); err != nil {
		return err
	}
	if m.world == 1 {
		return nil
	}
	n := len(m.params)
	mine := make([]int64, n)
	for i, np := range m.params {
		mine[i] = hashFloats(np.Param.Value.Data())
	}
	all := make([]int64, n*m.world)
	if err := m.pg.AllGather(ctx, dist.I64(all), dist.I64(mine)).Wait(); err != nil {
		return fmt.Errorf("ddp: VerifyReplicas: exchanging parameter hashes: %w", err)
	}
	var diverged []string
	for r := 1; r < m.world; r++ {
		for i := 0; i < n; i++ {
			if all[r*n+i] != all[i] {
				diverged = append(diverged, fmt.Sprintf("rank %d (first differing parameter %q)", r, m.params[i].Name))
				break
			}
		}
	}
	if len(diverged) > 0 {
		return fmt.Errorf("ddp: VerifyReplicas: replicas diverged from rank 0: %s", strings.Join(diverged, "; "))
	}
	return nil
}

// hashFloats is FNV-1a over the values' bit patterns, eight bytes at a
// time (a word-wise variant: fast, and any changed bit changes the hash
// with high probability).
func hashFloats(s []float32) int64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	i := 0
	for ; i+1 < len(s); i += 2 {
		h ^= uint64(math.Float32bits(s[i])) | uint64(math.Float32bits(s[i+1]))<<32
		h *= prime
	}
	if i < len(s) {
		h ^= uint64(math.Float32bits(s[i]))
		h *= prime
	}
	h ^= uint64(len(s))
	h *= prime
	return int64(h)
}
