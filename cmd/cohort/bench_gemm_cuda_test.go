package main

import (
	"errors"
	"io"
	"testing"

	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/tensor"
)

// Without a GPU, --device cuda fails with the driver's one line; a bad
// device is a usage error.
func TestBenchGemmDevice(t *testing.T) {
	if code := benchGemm([]string{"--device", "tpu"}); code != 2 {
		t.Errorf("--device tpu: exit %d, want 2", code)
	}
	err := gemmCUDA(io.Discard, tensor.CUDA(0), 64)
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

func TestBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		v    float32
		want uint16
	}{{1, 0x3f80}, {-2, 0xc000}, {1 + 1.0/256, 0x3f80}, {1 + 3.0/256, 0x3f82}, {1 + 1.0/128, 0x3f81}} {
		if got := bf16(c.v); got != c.want {
			t.Errorf("bf16(%g) = %#x, want %#x", c.v, got, c.want)
		}
	}
}
