package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/cohortml/cohort/device/cudatensor"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/tensor"
)

// TestDeviceFailsFast: -device cuda without a usable GPU fails with the
// one-line device error before the corpus is read (it does not exist);
// a device that opens (the fake one) stops there too, naming ddp.
func TestDeviceFailsFast(t *testing.T) {
	c := config{model: models.GPTMini(), steps: 1, batch: 1, logEvery: 1, data: t.TempDir() + "/absent.txt", device: "cuda"}
	if cudatensor.Init(tensor.CUDA(0)) == nil {
		t.Log("a GPU is present: only the ddp check runs")
	} else {
		err := run(context.Background(), c, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), "cudatensor: cuda:0: ") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("run: %v, want the one-line device error", err)
		}
	}
	c.device = fakebackend.Kind
	if err := run(context.Background(), c, io.Discard); err == nil || !strings.Contains(err.Error(), "ddp") {
		t.Fatalf("run on %s: %v, want the error naming ddp", fakebackend.Kind, err)
	}
}
