package main

import (
	"context"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cohortml/cohort/datasets"
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

// TestTrainOnFakeDevice runs the program's training loop (ddp as a world
// of one, without bucket views) with the model on the fake device: the
// moves of -device (model, batches in, loss and predictions out) are all
// a step needs.
func TestTrainOnFakeDevice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	mk := func(n int) *datasets.MNIST {
		ds := &datasets.MNIST{Images: make([]float32, n*784), Labels: make([]int64, n), Rows: 28, Cols: 28}
		for i := range ds.Images {
			ds.Images[i] = rng.Float32()
		}
		for i := range ds.Labels {
			ds.Labels[i] = int64(rng.IntN(10))
		}
		return ds
	}
	sets := [2]*datasets.MNIST{mk(32), mk(16)}
	for _, model := range []string{"mlp", "cnn"} {
		t.Run(model, func(t *testing.T) {
			var out strings.Builder
			c := config{model: model, epochs: 1, batch: 8, lr: 0.05, device: fakebackend.Kind, dir: mnistData(t, sets[0], sets[1])}
			before := fakebackend.Stats()
			if err := run(context.Background(), c, &out); err != nil {
				t.Fatal(err)
			}
			if d := fakebackend.Stats().Sub(before); d.Ops == 0 || d.Uploads < 4 {
				t.Errorf("fake device counters %+v: the steps did not run there", d)
			}
			if !strings.Contains(out.String(), "test accuracy") {
				t.Errorf("output:\n%s", out.String())
			}
		})
	}
}
