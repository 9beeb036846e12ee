package main

import (
	"errors"
	"io"
	"testing"

	"github.com/cohortml/cohort/bench"
	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/tensor"
)

// Without a GPU, --device cuda fails with the driver's one line; a bad
// device is a usage error.
func TestBenchGemmDevice(t *testing.T) {
	if code := benchGemm([]string{"--device", "tpu"}); code != 2 {
		t.Errorf("--device tpu: exit %d, want 2", code)
	}
	err := bench.GemmCUDA(io.Discard, tensor.CUDA(0), 64)
	if err == nil {
		t.Skip("skipped: a GPU is present (bench/gpu_check.sh times it)")
	}
	if !errors.Is(err, cuda.ErrNoDevice) && !errors.Is(err, cuda.ErrNotFound) {
		t.Errorf("gemmCUDA without a GPU: %v, want no device or no driver", err)
	}
	if code := benchGemm([]string{"--device", "cuda"}); code != 1 {
		t.Errorf("--device cuda without a GPU: exit %d, want 1", code)
	}
}
