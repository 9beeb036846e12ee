package main

import (
	"context"
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/cohortml/cohort/device/cudatensor"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/tensor"
)

// TestDeviceFailsFast: -device cuda without a usable GPU fails with the
// one-line device error before the corpus is read (it does not exist).
func TestDeviceFailsFast(t *testing.T) {
	c := config{model: models.GPTMini(), steps: 1, batch: 1, logEvery: 1, data: t.TempDir() + "/absent.txt", device: "cuda"}
	if cudatensor.Init(tensor.CUDA(0)) == nil {
		t.Skip("skipped: a GPU is present")
	}
	_, err := run(context.Background(), c, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "cudatensor: cuda:0: ") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("run: %v, want the one-line device error", err)
	}
}

// TestTrainOnFakeDevice trains a tiny GPT for a few steps as a world of
// one with the model on the fake device, whose backend runs the CPU
// twins: the losses equal the CPU run's bit for bit, so -device's moves
// (the model in, the losses out) are all a step needs.
func TestTrainOnFakeDevice(t *testing.T) {
	path := opticksHead(t, 20_000)
	losses := map[string]curve{}
	for _, dev := range []string{"cpu", fakebackend.Kind} {
		c := config{steps: 3, batch: 2, seed: 3, logEvery: 1, evalEvery: 3, data: path, model: tiny, device: dev}
		cv, err := run(context.Background(), c, io.Discard)
		if err != nil {
			t.Fatalf("-device %s: %v", dev, err)
		}
		losses[dev] = cv
	}
	cpu, fake := losses["cpu"], losses[fakebackend.Kind]
	if len(cpu.train) != 3 || len(cpu.val) != 1 || !maps.Equal(cpu.train, fake.train) || !maps.Equal(cpu.val, fake.val) {
		t.Errorf("losses %v on the fake device, %v on the CPU", fake, cpu)
	}
}
