package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/examples/internal/exampletest"
	"github.com/cohortml/cohort/models"
)

// tiny is the model of testdata/tiny_golden.json: GPT-mini's shape at a
// size that trains in milliseconds.
var tiny = models.GPTConfig{Vocab: 256, Ctx: 16, NLayer: 2, D: 16, NHead: 2}

// opticks returns the path of the anchor's text, or skips the test.
func opticks(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := datasets.OpticksPath(ctx)
	if err != nil {
		t.Skipf("Opticks text not available: %v", err)
	}
	return p
}

// opticksHead writes the first n bytes of Opticks to a file and returns
// its path: a text whose validation split is quick to evaluate.
func opticksHead(t *testing.T, n int) string {
	t.Helper()
	b, err := os.ReadFile(opticks(t))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "head.txt")
	if err := os.WriteFile(p, b[:min(n, len(b))], 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMatchesPyTorch trains the small model of testdata/tiny_golden.json
// (written by make_golden.py with the anchor's gpt_mini.py) from the same
// initial weights on the same batches and checks every step's loss and the
// final val loss against PyTorch's.
func TestMatchesPyTorch(t *testing.T) {
	path := opticks(t)
	raw, err := os.ReadFile(filepath.Join("testdata", "tiny_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Seed      uint64    `json:"seed"`
		Batch     int       `json:"batch"`
		Steps     int       `json:"steps"`
		ValAfter  float64   `json:"val_loss_after"`
		TrainLoss []float64 `json:"train_loss"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	c := config{steps: g.Steps, batch: g.Batch, seed: g.Seed, logEvery: 10, data: path,
		init: filepath.Join("testdata", "tiny_init.bin"), model: tiny}
	var out bytes.Buffer
	tr, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	worst := 0.0
	for i, want := range g.TrainLoss {
		d := math.Abs(tr.train[i+1] - want)
		worst = max(worst, d)
		if d > 2e-5 {
			t.Errorf("step %d: loss %.7f, PyTorch %.7f", i+1, tr.train[i+1], want)
		}
	}
	t.Logf("largest loss difference from PyTorch over %d steps: %.2g", g.Steps, worst)
	if v := tr.val[g.Steps]; math.Abs(v-g.ValAfter) > 2e-5 {
		t.Errorf("val loss %.7f, PyTorch %.7f", v, g.ValAfter)
	}
}

// TestTrainLearns runs the program on a small model and checks its report:
// the loss falls, validation happens every -eval-every steps, and the last
// line is the val loss.
func TestTrainLearns(t *testing.T) {
	path := opticksHead(t, 100_000)
	c := config{steps: 40, batch: 8, seed: 1, evalEvery: 20, logEvery: 10, data: path,
		model: models.GPTConfig{Vocab: 256, Ctx: 16, NLayer: 1, D: 32, NHead: 2}}
	var out bytes.Buffer
	if _, err := run(context.Background(), c, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	t.Logf("output:\n%s", out.String())
	last := regexp.MustCompile(`^val loss: (\d+\.\d{4})$`).FindStringSubmatch(lines[len(lines)-1])
	if last == nil {
		t.Fatalf("last line %q, want `val loss: X`", lines[len(lines)-1])
	}
	var train []float64
	for _, m := range regexp.MustCompile(`(?m)^step \d+: train loss (\d+\.\d+)`).FindAllStringSubmatch(out.String(), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		train = append(train, v)
	}
	if len(train) != 4 {
		t.Fatalf("%d training-loss lines for 40 steps logged every 10, want 4", len(train))
	}
	if !(train[3] < train[0]-0.2) {
		t.Errorf("training loss went %v: want it to fall by more than 0.2", train)
	}
	if n := strings.Count(out.String(), ": val loss "); n != 1 {
		t.Errorf("%d intermediate validations, want 1 (step 20)", n)
	}
	// An untrained byte model scores about ln 256 = 5.55.
	if v, _ := strconv.ParseFloat(last[1], 64); !(v < math.Log(256)-0.2) {
		t.Errorf("val loss %v after 40 steps, want below ln 256 − 0.2", v)
	}
}

// TestDataParallelEqualsOneProcess checks data parallelism over the
// in-process transport: world W with batch B follows, step by step, one
// process with batch W·B (the ranks split one draw and average their
// gradients), within float32 rounding.
func TestDataParallelEqualsOneProcess(t *testing.T) {
	path := opticksHead(t, 30_000) // 187 validation windows: 3 batches
	const steps, batch = 6, 4
	base := config{steps: steps, seed: 5, logEvery: 3, evalEvery: 3, data: path, model: tiny}
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			var one curve
			c := base
			c.batch = world * batch
			distributedtest.Run(t, 1, func(t *testing.T, pg distributed.ProcessGroup) {
				var err error
				if one, err = train(distributedtest.Context(t, time.Minute), c, pg, &bytes.Buffer{}); err != nil {
					t.Error(err)
				}
			})
			ranks := make([]curve, world)
			outs := make([]bytes.Buffer, world)
			distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				c := base
				c.batch = batch
				var err error
				if ranks[pg.Rank()], err = train(distributedtest.Context(t, time.Minute), c, pg, &outs[pg.Rank()]); err != nil {
					t.Error(err)
				}
			})
			if t.Failed() {
				return
			}
			for step := 1; step <= steps; step++ {
				mean := 0.0
				for _, tr := range ranks {
					mean += tr.train[step] / float64(world)
				}
				if d := math.Abs(mean - one.train[step]); d > 1e-5 {
					t.Errorf("step %d: mean loss over %d ranks %.7f, one process %.7f", step, world, mean, one.train[step])
				}
			}
			for _, step := range []int{3, steps} {
				for r, tr := range ranks {
					if d := math.Abs(tr.val[step] - one.val[step]); d > 1e-5 {
						t.Errorf("step %d: rank %d val loss %.7f, one process %.7f", step, r, tr.val[step], one.val[step])
					}
				}
			}
			if outs[1].Len() != 0 {
				t.Errorf("rank 1 printed %q; only rank 0 reports", outs[1].String())
			}
			if !strings.HasSuffix(outs[0].String(), fmt.Sprintf("val loss: %.4f\n", one.val[steps])) {
				t.Errorf("rank 0's report ends %q, want the val loss %.4f", outs[0].String(), one.val[steps])
			}
		})
	}
}

// workerEnv marks a copy of this test binary started by TestDistributed as
// one rank of the job; its value is the layout's -pp.
const workerEnv = "COHORT_GPT_TEST_WORKER"

// TestDistributed runs the program as two real processes under the
// launcher (this test binary, re-executed as the ranks), data parallel and
// as a two-stage pipeline; both print the val loss of one process.
func TestDistributed(t *testing.T) {
	cfg := config{steps: 4, batch: 4, seed: 2, logEvery: 2, data: os.Getenv("OPTICKS"), model: tiny}
	// The workers read the text from $OPTICKS, set below.
	if pp := os.Getenv(workerEnv); pp != "" {
		cfg.pp, _ = strconv.Atoi(pp)
		if cfg.pp == 1 {
			cfg.batch /= 2 // two replicas of 2 draw the 4 windows of one process
		}
		if _, err := run(context.Background(), cfg, os.Stdout); err != nil {
			t.Fatal(err)
		}
		return
	}
	if testing.Short() {
		t.Skip("starts two processes")
	}
	path := opticksHead(t, 30_000)
	c := cfg
	c.data = path
	one, err := run(context.Background(), c, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, pp, describe string }{
		{"dp=2", "1", "data parallel over 2 rank(s) (ddp); 2 replica(s) × batch 2"},
		{"pp=2", "2", "dp 1 × pp 2 × tp 1, 1f1b, 4 microbatches of 1×16; 1 replica(s) × batch 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exampletest.RunWorkers(t, "TestDistributed", 2, workerEnv+"="+tc.pp, "OPTICKS="+path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "[rank 0] GPT 2 layers, width 16, 2 heads, 10944 parameters; "+tc.describe) {
				t.Errorf("rank 0 did not describe the job as %q", tc.describe)
			}
			// Rank 0's last line (before the test binary's PASS).
			var last string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "[rank 0] ") && l != "[rank 0] PASS" {
					last = l
				}
			}
			if want := fmt.Sprintf("[rank 0] val loss: %.4f", one.val[cfg.steps]); last != want {
				t.Errorf("rank 0's last line %q, want the val loss of one process, %q", last, want)
			}
			if strings.Contains(out, "[rank 1] val loss") {
				t.Errorf("rank 1 reported: only rank 0 should")
			}
		})
	}
}

// TestPyTorchCurve follows the anchor's GPT-mini run (seed 0) from
// PyTorch's own initial weights, written by the anchors' gpt_bench.py
// --dump-init, and compares the first steps' losses with PyTorch's
// (testdata/pytorch_seed0.json: the anchor's recorded curve). It needs
// COHORT_ANCHORS (the anchors directory) and a Python with torch;
// COHORT_GPT_LONG=1 runs all 300 steps and checks the val loss.
func TestPyTorchCurve(t *testing.T) {
	anchors := os.Getenv("COHORT_ANCHORS")
	if anchors == "" {
		t.Skip("set COHORT_ANCHORS to the anchors directory (with gpt_bench.py) to run")
	}
	python := os.Getenv("PYTHON")
	if python == "" {
		python = "/usr/bin/python3"
	}
	if err := exec.Command(python, "-c", "import torch").Run(); err != nil {
		t.Skipf("%s has no torch: %v", python, err)
	}
	path := opticks(t)
	raw, err := os.ReadFile(filepath.Join("testdata", "pytorch_seed0.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		TrainLoss []float64          `json:"train_loss"`
		ValLoss   map[string]float64 `json:"val_loss"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	init := filepath.Join(t.TempDir(), "init0.bin")
	cmd := exec.Command(python, filepath.Join(anchors, "gpt_bench.py"), "--dump-init", init, "--dump-seed", "0")
	cmd.Dir = anchors
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpt_bench.py --dump-init: %v\n%s", err, b)
	}
	steps := 20
	if os.Getenv("COHORT_GPT_LONG") != "" {
		steps = 300
	}
	c := config{steps: steps, batch: 32, seed: 0, logEvery: 10, data: path, init: init,
		model: models.GPTMini()}
	var out bytes.Buffer
	tr, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	worst := 0.0
	for s := 1; s <= steps; s++ {
		d := math.Abs(tr.train[s] - g.TrainLoss[s-1])
		worst = max(worst, d)
		if d > 1e-4 {
			t.Errorf("step %d: loss %.6f, PyTorch %.6f", s, tr.train[s], g.TrainLoss[s-1])
		}
	}
	t.Logf("largest loss difference from PyTorch over %d steps: %.2g", steps, worst)
	if want, ok := g.ValLoss[strconv.Itoa(steps)]; ok {
		if d := math.Abs(tr.val[steps] - want); d > 1e-3 {
			t.Errorf("val loss after %d steps %.6f, PyTorch %.6f", steps, tr.val[steps], want)
		}
		t.Logf("val loss after %d steps %.6f, PyTorch %.6f", steps, tr.val[steps], want)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	good := config{steps: 1, batch: 1, logEvery: 1, model: tiny}
	for _, tc := range []struct {
		name   string
		modify func(*config)
		want   string
	}{
		{"steps", func(c *config) { c.steps = 0 }, "-steps 0"},
		{"batch", func(c *config) { c.batch = -1 }, "-batch -1"},
		{"eval-every", func(c *config) { c.evalEvery = -1 }, "-eval-every -1"},
		{"log-every", func(c *config) { c.logEvery = 0 }, "-log-every 0"},
		{"heads", func(c *config) { c.model.NHead = 3 }, "-width 16, -heads 3"},
		{"layers", func(c *config) { c.model.NLayer = 0 }, "-layers 0"},
		{"negative size", func(c *config) { c.tp = -1 }, "-tp -1"},
		{"stages without ranks", func(c *config) { c.data = opticks(t); c.pp = 2 }, "-pp 2 × -tp 1 does not divide the 1 ranks"},
		{"replicas without ranks", func(c *config) { c.data = opticks(t); c.dp = 2 }, "-dp 2 × -pp 1 × -tp 1 = 2 ranks, but the job has 1"},
		{"checkpoint-every", func(c *config) { c.ckptDir, c.ckptEvery = t.TempDir(), 0 }, "-checkpoint-every 0"},
		{"microbatches", func(c *config) { c.data = opticks(t); c.batch, c.microbatches = 4, 3 }, "-microbatches 3 do not divide a batch of 4 sequences"},
		{"unknown schedule", func(c *config) { c.data = opticks(t); c.schedule = "1f2b" }, `-schedule "1f2b": unknown (have gpipe, 1f1b`},
		{"schedule without stages", func(c *config) { c.data = opticks(t); c.schedule = "zb" }, "-schedule zb needs pipeline stages"},
		{"virtual without stages", func(c *config) { c.data = opticks(t); c.virtual = 2 }, "-virtual 2 needs pipeline stages"},
		{"recompute without stages", func(c *config) { c.data = opticks(t); c.recompute = true }, "-recompute needs pipeline or tensor parallelism"},
		{"batch beyond the text", func(c *config) { c.data = opticks(t); c.batch = 1_000_000_000_000 }, "-batch 1000000000000 × 1 replicas: more windows a step than the"},
		{"missing text", func(c *config) { c.data = filepath.Join(t.TempDir(), "none.txt") }, "none.txt"},
		{"missing init", func(c *config) { c.data = opticks(t); c.init = filepath.Join(t.TempDir(), "w.bin") }, "w.bin.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.modify(&c)
			_, err := run(context.Background(), c, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
