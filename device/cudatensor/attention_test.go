package cudatensor

import (
	"slices"
	"testing"

	"github.com/cohortml/cohort/tensor"
)

// TestAttentionSavesLSE: at GPT-2's sizes (batch 16 × 1024, 12 heads) the
// forward pass on the dry device keeps the log-sum-exp [B, H, T] (786 KB)
// for its backward pass, not the probabilities [B, H, T, T] (805 MB per
// layer, 9.6 GB for 12), launches the flash kernel alone and makes no
// GEMM; the backward pass reads the saved state.
func TestAttentionSavesLSE(t *testing.T) {
	const B, T, H, d = 16, 1024, 12, 768
	dev := tensor.NewDevice(dryKind, 0)
	qkv := tensor.NewOn(dev, B, T, 3*d)
	dryState.dry.mu.Lock()
	dryState.dry.launches, dryState.dry.gemms = nil, nil
	dryState.dry.mu.Unlock()
	y, saved := tensor.AttentionQKV(qkv, H, true)
	if !slices.Equal(y.Shape(), []int{B, T, d}) || !slices.Equal(saved.Shape(), []int{B, H, T}) {
		t.Fatalf("AttentionQKV on the device: y %v, saved %v; want [%d %d %d] and the log-sum-exp [%d %d %d]", y.Shape(), saved.Shape(), B, T, d, B, H, T)
	}
	var kernels []string
	for _, l := range dryState.dry.launches {
		kernels = append(kernels, l.kernel)
	}
	if !slices.Equal(kernels, []string{"attention_fwd_f32"}) || len(dryState.dry.gemms) != 0 {
		t.Errorf("forward launched %v and %d GEMMs, want the flash kernel alone", kernels, len(dryState.dry.gemms))
	}
	dqkv := tensor.AttentionQKVBackward(tensor.NewOn(dev, B, T, d), qkv, saved, H, true)
	if !slices.Equal(dqkv.Shape(), qkv.Shape()) {
		t.Errorf("backward: dqkv %v, want %v", dqkv.Shape(), qkv.Shape())
	}
}
