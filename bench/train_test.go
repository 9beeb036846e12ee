package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the workers join through InitFromEnv (cmd/cohort links the same)
)

func TestTrainRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the 60000-sample synthetic dataset")
	}
	for _, model := range []string{"mlp", "cnn"} {
		for _, withDDP := range []bool{false, true} {
			t.Run(model+map[bool]string{false: "/plain", true: "/ddp"}[withDDP], func(t *testing.T) {
				ctx := context.Background()
				var pg distributed.ProcessGroup
				if withDDP {
					var err error
					if pg, err = distributed.Init(ctx, distributed.Options{WorldSize: 1}); err != nil {
						t.Fatal(err)
					}
					defer pg.Close()
				}
				s := trainSpec{model: model, world: 1, ddp: withDDP, view: true, steps: 3, warmup: 3, fitHeap: true}
				r, err := trainRun(ctx, s, pg, "")
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]int{"mlp": 1863690, "cnn": 61706}[model]
				if r.Params != want {
					t.Errorf("%d parameters, want %d (the anchor model)", r.Params, want)
				}
				if r.Wall <= 0 || r.Data < 0 || r.Data > r.Wall {
					t.Errorf("wall %v, data %v: want 0 < data ≤ wall", r.Wall, r.Data)
				}
				if r.FirstSteps != 3 || r.First <= 0 || r.First > r.Wall || r.Faults < 0 {
					t.Errorf("first %d steps in %v of wall %v, faults %d: want all 3 timed steps, within the wall time", r.FirstSteps, r.First, r.Wall, r.Faults)
				}
				// Untrained 10-way classification: the loss starts near ln 10.
				if l := float64(r.LastLoss); math.IsNaN(l) || math.Abs(l-math.Log(10)) > 0.5 {
					t.Errorf("loss after 6 steps %v, want about ln 10 = 2.30", l)
				}
				switch {
				case withDDP && (r.DDP == nil || r.DDP.Steps != 3):
					t.Errorf("ddp statistics %+v, want 3 timed steps", r.DDP)
				case !withDDP && r.DDP != nil:
					t.Errorf("ddp statistics %+v without ddp", r.DDP)
				}
			})
		}
	}
}

// TestGPTTrainRun runs a few steps of the GPT-mini benchmark in this
// process (world 1) and checks the result: the anchor's parameter count, a
// loss that starts near ln 256 and falls, and the report's last line.
func TestGPTTrainRun(t *testing.T) {
	if testing.Short() {
		t.Skip("trains GPT-mini for a few steps")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := datasets.OpticksPath(ctx); err != nil {
		t.Skipf("Opticks text not available: %v", err)
	}
	for _, dtype := range []string{"fp32", "bf16"} {
		t.Run("dtype="+dtype, func(t *testing.T) {
			s := trainSpec{model: "gpt", world: 1, ddp: false, transport: "auto", threads: 1, steps: 3, warmup: 2, dtype: dtype}
			testGPTTrainRun(ctx, t, s)
		})
	}
}

func testGPTTrainRun(ctx context.Context, t *testing.T, s trainSpec) {
	r, err := gptTrainRun(ctx, s, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Params != 834304 {
		t.Errorf("%d parameters, want 834,304 (GPT-mini)", r.Params)
	}
	if r.Wall <= 0 || r.Data < 0 || r.Data > r.Wall || r.AllReduce != 0 || r.DDP != nil {
		t.Errorf("result %+v: want 0 ≤ data ≤ wall and no communication in a world of one", r)
	}
	// Untrained, the loss is about ln 256 = 5.55; 5 AdamW steps at lr 3e-4
	// bring it down by a few tenths (PyTorch: 5.58, then 4.76 at step 5).
	if l := float64(r.LastLoss); math.IsNaN(l) || l > 5.3 || l < 4 {
		t.Errorf("loss after 5 steps %v, want between 4 and 5.3", l)
	}
	var rep, js bytes.Buffer
	printTrain(&rep, s, r)
	lines := strings.Split(strings.TrimSpace(rep.String()), "\n")
	if last := lines[len(lines)-1]; !regexp.MustCompile(`^train: gpt world 1 dtype ` + s.dtype + ` tokens/s \d+ first\d+ \d+$`).MatchString(last) {
		t.Errorf("last line %q, want `train: gpt world 1 dtype %s tokens/s X firstN Y`", last, s.dtype)
	}
	if err := printTrainJSON(&js, s, r); err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(js.Bytes(), &rec); err != nil {
		t.Fatalf("JSON report %q: %v", js.String(), err)
	}
	if tok, _ := rec["tokens_per_s"].(float64); rec["bench"] != "gpt_tput" || rec["dtype"] != s.dtype || math.Abs(tok-float64(3*32*64)/r.Wall.Seconds()) > 1e-6*tok {
		t.Errorf("JSON report %v: want bench gpt_tput, dtype %s and tokens_per_s = 3·32·64 / wall", rec, s.dtype)
	}
}

// TestParseBenchTrain checks the flags that are accepted: each model's
// anchor step counts by default, and explicit values kept.
func TestParseBenchTrain(t *testing.T) {
	for _, tc := range []struct {
		name         string
		args         []string
		want         trainSpec
		worker, json bool
	}{
		{"mlp defaults", nil, trainSpec{model: "mlp", world: 1, ddp: true, view: true, transport: "auto", threads: 1, steps: 200, warmup: 20, dtype: "fp32", fitHeap: true}, false, false},
		{"cnn world 2", []string{"--model", "cnn", "--world", "2"}, trainSpec{model: "cnn", world: 2, ddp: true, view: true, transport: "auto", threads: 1, steps: 200, warmup: 20, dtype: "fp32", fitHeap: true}, false, false},
		{"gpt defaults", []string{"--model", "gpt"}, trainSpec{model: "gpt", world: 1, ddp: true, view: true, transport: "auto", threads: 1, steps: 100, warmup: 10, dtype: "fp32", fitHeap: true}, false, false},
		{"gpt world 2 threads 2 json", []string{"--model", "gpt", "--threads", "2", "--world", "2", "--json"},
			trainSpec{model: "gpt", world: 2, ddp: true, view: true, transport: "auto", threads: 2, steps: 100, warmup: 10, dtype: "fp32", fitHeap: true}, false, true},
		{"gpt explicit steps", []string{"--model=gpt", "--steps", "7", "--warmup", "0", "--transport", "tcp", "--worker"},
			trainSpec{model: "gpt", world: 1, ddp: true, view: true, transport: "tcp", threads: 1, steps: 7, warmup: 0, dtype: "fp32", fitHeap: true}, true, false},
		{"cnn bf16", []string{"--model", "cnn", "--dtype", "bf16"}, trainSpec{model: "cnn", world: 1, ddp: true, view: true, transport: "auto", threads: 1, steps: 200, warmup: 20, dtype: "bf16", fitHeap: true}, false, false},
		{"cnn heap left alone", []string{"--model", "cnn", "--fit-heap=false"}, trainSpec{model: "cnn", world: 1, ddp: true, view: true, transport: "auto", threads: 1, steps: 200, warmup: 20, dtype: "fp32"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd, code := parseBenchTrain(tc.args, &stderr)
			if code != -1 {
				t.Fatalf("parseBenchTrain(%q): exit code %d, stderr %q", tc.args, code, stderr.String())
			}
			if cmd.spec != tc.want || cmd.worker != tc.worker || cmd.asJSON != tc.json {
				t.Errorf("parseBenchTrain(%q) = %+v, want %+v worker %v json %v", tc.args, cmd, tc.want, tc.worker, tc.json)
			}
		})
	}
}

// TestParseBenchTrainDType: --dtype takes fp32 and bf16 only, and bf16
// not with the sharded workload.
func TestParseBenchTrainDType(t *testing.T) {
	for _, args := range [][]string{{"--dtype", "fp16"}, {"--dtype", "bf16", "--shard", "zero1"}} {
		var stderr bytes.Buffer
		if _, code := parseBenchTrain(args, &stderr); code == -1 || !strings.Contains(stderr.String(), "--dtype") {
			t.Errorf("parseBenchTrain(%q): exit code %d, stderr %q: want it refused naming --dtype", args, code, stderr.String())
		}
	}
}

// workerArgsEnv carries, in a copy of this test binary started by
// spawnTrain, the benchmark's worker flags (separated by newlines).
const workerArgsEnv = "COHORT_TEST_BENCH_TRAIN_WORKER"

// TestBenchTrainWorker is the body of the worker processes of
// TestSpawnTrain; run directly it does nothing.
func TestBenchTrainWorker(t *testing.T) {
	if os.Getenv(workerArgsEnv) == "" {
		t.Skip("runs only as a worker of TestSpawnTrain")
	}
	if code := Train(nil, flag.Args()); code != 0 {
		t.Fatalf("benchTrain exited %d", code)
	}
}

// workerSelf runs this test binary as a worker of TestBenchTrainWorker;
// workerEnv is its environment.
var workerSelf = []string{os.Args[0], "-test.run=^TestBenchTrainWorker$", "-test.timeout=2m", "--"}

func workerEnv() []string { return append(os.Environ(), workerArgsEnv+"=1") }

// spawnWorkers runs s as real worker processes under the launcher (2
// minutes at most) and returns rank 0's result, or fails the test with
// the workers' output.
func spawnWorkers(t *testing.T, s trainSpec) trainResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	r, err := spawnTrain(ctx, s, workerSelf, workerEnv(), &out)
	if err != nil {
		t.Fatalf("%v\nworkers' output:\n%s", err, out.String())
	}
	return r
}

// TestSpawnTrain runs the benchmark as real worker processes under the
// launcher, over each transport, and checks rank 0's report.
func TestSpawnTrain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes that build the synthetic dataset")
	}
	for _, tc := range []struct {
		name string
		spec trainSpec
	}{
		{"world=1/no-ddp", trainSpec{model: "mlp", world: 1, ddp: false, transport: "auto"}},
		{"world=2/tcp", trainSpec{model: "mlp", world: 2, ddp: true, view: true, transport: "tcp", gomaxprocs: 1}},
		{"world=2/shm/copy", trainSpec{model: "cnn", world: 2, ddp: true, view: false, transport: "shm"}},
		{"gpt/world=2", trainSpec{model: "gpt", world: 2, ddp: true, view: true, transport: "auto"}},
		{"gpt/world=2/bf16", trainSpec{model: "gpt", world: 2, ddp: true, view: true, transport: "auto", dtype: "bf16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec
			s.threads, s.steps, s.warmup = 1, 4, 1
			r := spawnWorkers(t, s)
			if r.Params == 0 || r.Wall <= 0 || r.GOMAXPROCS < 1 || r.Gemm == "" {
				t.Errorf("result %+v: want parameters, a wall time, GOMAXPROCS and the GEMM kernel", r)
			}
			if s.gomaxprocs > 0 && r.GOMAXPROCS != s.gomaxprocs {
				t.Errorf("workers ran with GOMAXPROCS %d, want --gomaxprocs %d", r.GOMAXPROCS, s.gomaxprocs)
			}
			switch {
			case s.model == "gpt":
				if r.DDP != nil || r.AllReduce <= 0 {
					t.Errorf("gpt at world %d: ddp statistics %+v and all-reduce time %v, want none and some", s.world, r.DDP, r.AllReduce)
				}
			case s.ddp != (r.DDP != nil) || (r.DDP != nil && r.DDP.Steps != 4):
				t.Errorf("ddp statistics %+v, want 4 timed steps iff ddp", r.DDP)
			case s.world > 1 && (r.DDP == nil || r.DDP.Comm <= 0 || r.DDP.Bytes == 0):
				t.Errorf("ddp statistics %+v: want gradient communication at world %d", r.DDP, s.world)
			}
			var rep bytes.Buffer
			printTrain(&rep, s, r)
			lines := strings.Split(strings.TrimSpace(rep.String()), "\n")
			last := lines[len(lines)-1]
			unit := map[bool]string{false: " samples/s ", true: " tokens/s "}[s.model == "gpt"]
			if want := "train: " + s.model + " world " + strconv.Itoa(s.world) + " dtype " + s.dtypeName() + unit; !strings.HasPrefix(last, want) {
				t.Errorf("last line %q, want it to start %q", last, want)
			}
		})
	}
	t.Run("failing-worker", func(t *testing.T) {
		s := trainSpec{model: "mlp", world: 2, ddp: true, view: true, transport: "tcp", threads: 1, steps: 2, warmup: 0}
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bad := workerSelf[:len(workerSelf)-1] // no "--": the test binary rejects the worker flags
		_, err := spawnTrain(ctx, s, bad, workerEnv(), &out)
		if err == nil || !strings.Contains(err.Error(), "rank") {
			t.Errorf("spawnTrain with failing workers: %v, want an error naming the rank", err)
		}
	})
}

func TestBenchTrainFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown model":     {"--model", "resnet"},
		"zero threads":      {"--threads", "0"},
		"negative steps":    {"--steps", "-1"},
		"negative warm":     {"--warmup", "-2"},
		"gpt negative warm": {"--model", "gpt", "--warmup", "-3"},
		"zero world":        {"--world", "0"},
		"no ddp at world 2": {"--world", "2", "--ddp=false"},
		"bad transport":     {"--transport", "ib"},
		"negative procs":    {"--gomaxprocs", "-1"},
		"stray argument":    {"extra"},
		"unknown flag":      {"--bogus"},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			if _, code := parseBenchTrain(args, &stderr); code != 2 || stderr.Len() == 0 {
				t.Errorf("parseBenchTrain(%q): exit code %d, stderr %q; want 2 (usage error) and a message", args, code, stderr.String())
			}
		})
	}
}
