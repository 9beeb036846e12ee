package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/cohortml/cohort/datasets"
)

// TestEmptySetsAreErrors: an empty training or test set stops the run
// with an error saying which, instead of training 0 steps or printing an
// accuracy of NaN.
func TestEmptySetsAreErrors(t *testing.T) {
	some := &datasets.MNIST{Images: make([]float32, 4*28*28), Labels: make([]int64, 4), Rows: 28, Cols: 28}
	none := &datasets.MNIST{Rows: 28, Cols: 28}
	for _, tc := range []struct {
		name        string
		train, test *datasets.MNIST
		want        string
	}{
		{"train", none, some, "training set is empty"},
		{"test", some, none, "test set is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config{model: "mlp", epochs: 1, batch: 2, lr: 0.05, seed: 1}
			c.dir = mnistData(t, tc.train, tc.test)
			err := run(context.Background(), c, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
