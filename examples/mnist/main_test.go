package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"cohort/datasets"
	"cohort/ddp"
	"cohort/dist"
	"cohort/launch"
	"cohort/models"
	"cohort/nn"
	"cohort/optim"
)

// TestTrainLearns trains each model briefly on a slice of real MNIST as a
// world of one and checks that it learned something well beyond chance.
func TestTrainLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("loads MNIST and trains")
	}
	train, test, err := datasets.LoadMNIST("")
	if err != nil {
		t.Skipf("MNIST not available: %v", err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		model func(*rand.Rand) *nn.Sequential
		shape []int
	}{
		{"mlp", models.MLP, []int{784}},
		{"cnn", models.LeNet, []int{1, 28, 28}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg, err := dist.Init(ctx, dist.Options{WorldSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer pg.Close()
			net := tc.model(rand.New(rand.NewPCG(1, 0)))
			m, err := ddp.Wrap(ctx, net, pg, ddp.Options{GradientAsBucketView: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: 0.05}}, optim.SGDOptions{Momentum: 0.9})
			if err != nil {
				t.Fatal(err)
			}
			sched, err := optim.NewScheduler(opt, optim.CosineAnnealingLR{TMax: 150})
			if err != nil {
				t.Fatal(err)
			}
			order := rand.New(rand.NewPCG(2, 0)).Perm(train.Len())[:9600]
			loss, err := trainEpoch(ctx, m, opt, sched, train, order, 64, tc.shape)
			if err != nil {
				t.Fatal(err)
			}
			if st := m.Stats(); st.Steps != 150 {
				t.Errorf("ddp counted %d synchronised steps for 150 batches", st.Steps)
			}
			acc := evaluate(net, subset(test, 1000), tc.shape)
			t.Logf("%s: mean loss %.3f, accuracy %.3f after 150 steps", tc.name, loss, acc)
			if acc < 0.85 {
				t.Errorf("accuracy %.3f after 150 steps, want ≥ 0.85", acc)
			}
		})
	}
}

// workerEnv marks a copy of this test binary started by TestDistributed as
// one rank of the job.
const workerEnv = "COHORT_MNIST_TEST_WORKER"

// TestDistributed runs the program as two real processes under the
// launcher (this test binary, re-executed as the ranks) on a slice of
// MNIST: both ranks train on their own half, rank 0 reports the accuracy.
func TestDistributed(t *testing.T) {
	cfg := config{model: "mlp", epochs: 2, batch: 32, lr: 0.05, seed: 3, limit: 2560}
	if os.Getenv(workerEnv) != "" {
		if err := run(context.Background(), cfg, os.Stdout); err != nil {
			t.Fatal(err)
		}
		return
	}
	if testing.Short() {
		t.Skip("starts two processes that load MNIST")
	}
	if _, _, err := datasets.LoadMNIST(""); err != nil {
		t.Skipf("MNIST not available: %v", err)
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := launch.Run(ctx, launch.Config{
		NProcPerNode: 2,
		Program:      os.Args[0],
		Args:         []string{"-test.run=^TestDistributed$", "-test.timeout=2m"},
		Env:          append(os.Environ(), workerEnv+"=1"),
		Stdout:       &stdout,
		Stderr:       &stderr,
	})
	t.Logf("workers' output:\n%s%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	for _, want := range []string{
		"[rank 0] mlp on 2 rank(s), batch 32 per rank, peak lr 0.0500, 80 steps", // 2560/2 samples, 40 batches, 2 epochs
		"[rank 0] epoch 2: ", "[rank 1] epoch 2: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "[rank 1] test accuracy") {
		t.Errorf("rank 1 evaluated: only rank 0 should")
	}
	m := regexp.MustCompile(`\[rank 0\] test accuracy: (0\.\d{4})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("rank 0 printed no test accuracy")
	}
	if acc, _ := strconv.ParseFloat(m[1], 64); acc < 0.8 {
		t.Errorf("test accuracy %v after 80 steps on 2 ranks, want ≥ 0.8", acc)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	good := config{model: "mlp", epochs: 1, batch: 64, lr: 0.01, seed: 1}
	for _, tc := range []struct {
		name   string
		modify func(*config)
		want   string
	}{
		{"model", func(c *config) { c.model = "resnet" }, `-model "resnet"`},
		{"epochs", func(c *config) { c.epochs = 0 }, "-epochs 0"},
		{"batch", func(c *config) { c.batch = 0 }, "-batch 0"},
		{"lr", func(c *config) { c.lr = -1 }, "-lr -1"},
		{"limit", func(c *config) { c.limit = -5 }, "-limit -5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.modify(&c)
			err := run(context.Background(), c, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
