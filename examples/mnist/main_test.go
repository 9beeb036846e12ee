package main

import (
	"math/rand/v2"
	"strings"
	"testing"

	"cohort/datasets"
	"cohort/models"
	"cohort/nn"
	"cohort/optim"
)

// TestTrainLearns trains each model briefly on a slice of real MNIST and
// checks that it learned something well beyond chance.
func TestTrainLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("loads MNIST and trains")
	}
	train, test, err := datasets.LoadMNIST("")
	if err != nil {
		t.Skipf("MNIST not available: %v", err)
	}
	for _, tc := range []struct {
		name  string
		model func(*rand.Rand) *nn.Sequential
		shape []int
	}{
		{"mlp", models.MLP, []int{784}},
		{"cnn", models.LeNet, []int{1, 28, 28}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.model(rand.New(rand.NewPCG(1, 0)))
			opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: 0.01}}, optim.SGDOptions{Momentum: 0.9})
			if err != nil {
				t.Fatal(err)
			}
			order := rand.New(rand.NewPCG(2, 0)).Perm(train.Len())[:9600]
			syncs := 0
			loss := trainEpoch(m, opt, nil, train, order, 64, tc.shape, func() { syncs++ })
			if syncs != 150 {
				t.Errorf("afterBackward ran %d times for 150 steps", syncs)
			}
			sub := &datasets.MNIST{Images: test.Images[:1000*784], Labels: test.Labels[:1000], Rows: 28, Cols: 28}
			acc := evaluate(m, sub, tc.shape)
			t.Logf("%s: mean loss %.3f, accuracy %.3f after 150 steps", tc.name, loss, acc)
			if acc < 0.85 {
				t.Errorf("accuracy %.3f after 150 steps, want ≥ 0.85", acc)
			}
		})
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name   string
		model  string
		epochs int
		batch  int
		lr     float64
		want   string
	}{
		{"model", "resnet", 1, 64, 0.01, `-model "resnet"`},
		{"epochs", "mlp", 0, 64, 0.01, "-epochs 0"},
		{"batch", "mlp", 1, 0, 0.01, "-batch 0"},
		{"lr", "mlp", 1, 64, -1, "-lr -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.model, tc.epochs, tc.batch, tc.lr, 1, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
