package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/cohortml/cohort/device/cudatensor"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/tensor"
)

// TestDeviceFailsFast: -device cuda on a machine without a usable GPU
// fails with the one-line device error before any data is loaded (the
// data directory does not exist).
func TestDeviceFailsFast(t *testing.T) {
	if cudatensor.Init(tensor.CUDA(0)) == nil {
		t.Skip("skipped: a GPU is present")
	}
	c := config{model: "mlp", epochs: 1, batch: 8, lr: 0.05, device: "cuda", dir: t.TempDir() + "/absent"}
	err := run(context.Background(), c, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "cudatensor: cuda:0: ") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("run: %v, want the one-line device error", err)
	}
	c.device = "gpu:x"
	if err := run(context.Background(), c, io.Discard); err == nil || !strings.Contains(err.Error(), "gpu:x") {
		t.Fatalf("run with -device gpu:x: %v, want a parse error naming it", err)
	}
}

// TestDeviceNeedsDDP: on a device that opens (the fake one), the program
// stops before loading data, naming what is missing: ddp's device support.
func TestDeviceNeedsDDP(t *testing.T) {
	c := config{model: "mlp", epochs: 1, batch: 8, lr: 0.05, device: fakebackend.Kind, dir: t.TempDir() + "/absent"}
	err := run(context.Background(), c, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "ddp") {
		t.Fatalf("run: %v, want the error naming ddp", err)
	}
}
