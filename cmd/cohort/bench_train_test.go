package main

import (
	"bytes"
	"context"
	"flag"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"cohort/dist"
)

func TestTrainRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the 60000-sample synthetic dataset")
	}
	for _, model := range []string{"mlp", "cnn"} {
		for _, withDDP := range []bool{false, true} {
			t.Run(model+map[bool]string{false: "/plain", true: "/ddp"}[withDDP], func(t *testing.T) {
				ctx := context.Background()
				var pg dist.ProcessGroup
				if withDDP {
					var err error
					if pg, err = dist.Init(ctx, dist.Options{WorldSize: 1}); err != nil {
						t.Fatal(err)
					}
					defer pg.Close()
				}
				s := trainSpec{model: model, world: 1, ddp: withDDP, view: true, steps: 3, warmup: 1}
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
				// Untrained 10-way classification: the loss starts near ln 10.
				if l := float64(r.LastLoss); math.IsNaN(l) || math.Abs(l-math.Log(10)) > 0.5 {
					t.Errorf("loss after 4 steps %v, want about ln 10 = 2.30", l)
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

// workerArgsEnv carries, in a copy of this test binary started by
// spawnTrain, the benchmark's worker flags (separated by newlines).
const workerArgsEnv = "COHORT_TEST_BENCH_TRAIN_WORKER"

// TestBenchTrainWorker is the body of the worker processes of
// TestSpawnTrain; run directly it does nothing.
func TestBenchTrainWorker(t *testing.T) {
	if os.Getenv(workerArgsEnv) == "" {
		t.Skip("runs only as a worker of TestSpawnTrain")
	}
	if code := benchTrain(flag.Args()); code != 0 {
		t.Fatalf("benchTrain exited %d", code)
	}
}

// TestSpawnTrain runs the benchmark as real worker processes under the
// launcher, over each transport, and checks rank 0's report.
func TestSpawnTrain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes that build the synthetic dataset")
	}
	self := []string{os.Args[0], "-test.run=^TestBenchTrainWorker$", "-test.timeout=2m", "--"}
	env := append(os.Environ(), workerArgsEnv+"=1")
	for _, tc := range []struct {
		name string
		spec trainSpec
	}{
		{"world=1/no-ddp", trainSpec{model: "mlp", world: 1, ddp: false, transport: "auto"}},
		{"world=2/tcp", trainSpec{model: "mlp", world: 2, ddp: true, view: true, transport: "tcp", gomaxprocs: 1}},
		{"world=2/shm/copy", trainSpec{model: "cnn", world: 2, ddp: true, view: false, transport: "shm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec
			s.threads, s.steps, s.warmup = 1, 4, 1
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out bytes.Buffer
			r, err := spawnTrain(ctx, s, self, env, &out)
			if err != nil {
				t.Fatalf("%v\nworkers' output:\n%s", err, out.String())
			}
			if r.Params == 0 || r.Wall <= 0 || r.GOMAXPROCS < 1 || r.Gemm == "" {
				t.Errorf("result %+v: want parameters, a wall time, GOMAXPROCS and the GEMM kernel", r)
			}
			if s.gomaxprocs > 0 && r.GOMAXPROCS != s.gomaxprocs {
				t.Errorf("workers ran with GOMAXPROCS %d, want --gomaxprocs %d", r.GOMAXPROCS, s.gomaxprocs)
			}
			if s.ddp != (r.DDP != nil) || (r.DDP != nil && r.DDP.Steps != 4) {
				t.Errorf("ddp statistics %+v, want 4 timed steps iff ddp", r.DDP)
			}
			if s.world > 1 && (r.DDP == nil || r.DDP.Comm <= 0 || r.DDP.Bytes == 0) {
				t.Errorf("ddp statistics %+v: want gradient communication at world %d", r.DDP, s.world)
			}
			var rep bytes.Buffer
			printTrain(&rep, s, r)
			lines := strings.Split(strings.TrimSpace(rep.String()), "\n")
			last := lines[len(lines)-1]
			if want := "train: " + s.model + " world " + strconv.Itoa(s.world) + " samples/s "; !strings.HasPrefix(last, want) {
				t.Errorf("last line %q, want it to start %q", last, want)
			}
		})
	}
	t.Run("failing-worker", func(t *testing.T) {
		s := trainSpec{model: "mlp", world: 2, ddp: true, view: true, transport: "tcp", threads: 1, steps: 2, warmup: 0}
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bad := self[:len(self)-1] // no "--": the test binary rejects the worker flags
		_, err := spawnTrain(ctx, s, bad, env, &out)
		if err == nil || !strings.Contains(err.Error(), "rank") {
			t.Errorf("spawnTrain with failing workers: %v, want an error naming the rank", err)
		}
	})
}

func TestBenchTrainFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown model":     {"--model", "resnet"},
		"zero threads":      {"--threads", "0"},
		"zero steps":        {"--steps", "0"},
		"negative warm":     {"--warmup", "-1"},
		"zero world":        {"--world", "0"},
		"no ddp at world 2": {"--world", "2", "--ddp=false"},
		"bad transport":     {"--transport", "ib"},
		"negative procs":    {"--gomaxprocs", "-1"},
		"stray argument":    {"extra"},
		"unknown flag":      {"--bogus"},
	} {
		t.Run(name, func(t *testing.T) {
			if code := benchTrain(args); code != 2 {
				t.Errorf("benchTrain(%q) = %d, want 2 (usage error)", args, code)
			}
		})
	}
}

func TestBenchGemmFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"bad threads":    {"--threads", "1,x"},
		"zero threads":   {"--threads", "0"},
		"unknown shape":  {"--shapes", "128^3,nope"},
		"stray argument": {"extra"},
	} {
		t.Run(name, func(t *testing.T) {
			if code := benchGemm(args); code != 2 {
				t.Errorf("benchGemm(%q) = %d, want 2 (usage error)", args, code)
			}
		})
	}
}
