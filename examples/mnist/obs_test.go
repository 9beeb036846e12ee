package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/obs"
	"github.com/cohortml/cohort/obs/trace"
	"github.com/cohortml/cohort/recipe"
)

// mlpGradBytes is the MLP's gradient size: 784·1024+1024 + 1024·1024+1024
// + 1024·10+10 float32s.
const mlpGradBytes = 4 * (784*1024 + 1024 + 1024*1024 + 1024 + 1024*10 + 10)

// TestObservedRun trains 2 ranks in this process with COHORT_TRACE set and
// checks what a watcher sees: rank 0 alone prints progress lines (plain,
// since its output is not a terminal) ending at the last step, and each
// rank writes a valid trace with one span per step for the batch, forward,
// backward, optimizer, the wait for gradients and each bucket's
// all-reduce.
// TestStepReports runs the program's epoch loop on 2 ranks: every step's
// report splits its time exactly into data wait, exposed communication and
// compute, and counts the gradient bytes all-reduced.
func TestStepReports(t *testing.T) {
	trainSet, _ := mnistOrSkip(t)
	const world, steps = 2, 4
	reports := make([][]obs.Step, world)
	distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		m, err := ddp.Wrap(ctx, models.MLP(rand.New(rand.NewPCG(1, 0))), pg, ddp.Options{GradientAsBucketView: true})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		opt, err := recipe.NewSGD(nn.Parameters(m), 0.05)
		if err != nil {
			t.Fatal(err)
		}
		order := rand.New(rand.NewPCG(2, uint64(pg.Rank()))).Perm(trainSet.Len())[:steps*32]
		w := watch{seen: func(s obs.Step) { reports[pg.Rank()] = append(reports[pg.Rank()], s) }}
		if _, err := trainEpoch(ctx, m, opt, nil, trainSet, order, 32, []int{784}, w, nil); err != nil {
			t.Fatal(err)
		}
	})
	for r, rs := range reports {
		if len(rs) != steps {
			t.Fatalf("rank %d: %d step reports, want %d", r, len(rs), steps)
		}
		for i, s := range rs {
			if s.Step != i || s.Epoch != 1 || s.Samples != 32 || s.Bytes != mlpGradBytes || math.IsNaN(s.Loss) || s.Loss <= 0 {
				t.Errorf("rank %d report %d: %+v", r, i, s)
			}
			if s.DataWait <= 0 || s.Comm < 0 || s.Compute <= 0 || s.DataWait+s.Comm+s.Compute != s.Duration {
				t.Errorf("rank %d step %d: data %v + comm %v + compute %v != step %v", r, i, s.DataWait, s.Comm, s.Compute, s.Duration)
			}
		}
	}
}

func TestObservedRun(t *testing.T) {
	trainSet, testSet := mnistOrSkip(t)
	const world, steps = 2, 4 // 256 samples, 128 per rank in batches of 32
	dir := t.TempDir()
	c := config{model: "mlp", epochs: 1, batch: 32, lr: 0.05, seed: 3, limit: 256,
		dir: mnistData(t, subset(trainSet, 256), subset(testSet, 50)),
		getenv: func(k string) string {
			if k == "COHORT_TRACE" {
				return dir
			}
			return ""
		}}
	outs, errs := make([]strings.Builder, world), make([]error, world)
	distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		errs[pg.Rank()] = train(context.Background(), c, pg, &outs[pg.Rank()])
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%v\n%s", err, outs[0].String())
	}
	out0 := outs[0].String()
	t.Logf("rank 0:\n%s", out0)
	for _, want := range []string{"step 1/4 (25%) epoch 1 loss ", "step 4/4 (100%) epoch 1 loss "} {
		if !strings.Contains(out0, want) {
			t.Errorf("rank 0's output lacks the progress line %q", want)
		}
	}
	if strings.Contains(outs[1].String(), "step 1/") {
		t.Errorf("rank 1 printed progress:\n%s", outs[1].String())
	}
	for r := range world {
		f, err := os.Open(filepath.Join(dir, trace.FileName(r)))
		if err != nil {
			t.Fatal(err)
		}
		events, err := trace.Read(f, f.Name())
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := trace.Validate(events); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		count := map[string]int{}
		for _, e := range events {
			if e.Ph == "X" {
				count[e.Cat+"/"+e.Name]++
			}
		}
		for _, span := range []string{"step/step", "data/batch", "compute/forward", "compute/backward", "compute/optimizer",
			"compute/wait for gradients", "comm/all_reduce bucket 0", "comm/all_reduce bucket 1"} {
			if count[span] != steps {
				t.Errorf("rank %d: %d %q spans, want %d (all: %v)", r, count[span], span, steps, count)
			}
		}
	}
}

// checkTraceOverlap merges the ranks' traces in dir, as `cohort trace
// merge` does, checks the result against the trace-event format, and
// checks on every rank and every step that the first bucket's all-reduce
// overlaps backward: it was launched inside the step's "backward" span and
// before autograd returned (the start of "wait for gradients"). It logs
// how much all-reduce time ran behind backward.
func checkTraceOverlap(t testReporter, dir string, world, steps int) {
	t.Helper()
	var buf bytes.Buffer
	n, err := trace.Merge(dir, &buf)
	if err != nil || n != world {
		t.Fatalf("merging %d traces: %d, %v", world, n, err)
	}
	events, err := trace.Read(&buf, "merged")
	if err != nil {
		t.Fatalf("%v", err)
	}
	if err := trace.Validate(events); err != nil {
		t.Fatalf("%v", err)
	}
	type span struct{ begin, end float64 }
	spans := map[int]map[string][]span{} // pid → name → spans in time order
	for _, e := range events {
		if e.Ph != "X" {
			continue
		}
		if spans[*e.PID] == nil {
			spans[*e.PID] = map[string][]span{}
		}
		spans[*e.PID][e.Name] = append(spans[*e.PID][e.Name], span{*e.TS, *e.TS + *e.Dur})
	}
	if len(spans) != world {
		t.Fatalf("merged trace has %d ranks, want %d", len(spans), world)
	}
	for pid, byName := range spans {
		for _, ss := range byName {
			sort.Slice(ss, func(i, j int) bool { return ss[i].begin < ss[j].begin })
		}
		back, wait, b0 := byName["backward"], byName["wait for gradients"], byName["all_reduce bucket 0"]
		if len(back) != steps || len(wait) != steps || len(b0) != steps {
			t.Fatalf("rank %d: %d backward, %d wait, %d bucket-0 spans; want %d each", pid, len(back), len(wait), len(b0), steps)
		}
		var hidden, busy, backward float64
		for s := range steps {
			bk, w, a := back[s], wait[s], b0[s]
			if a.begin < bk.begin || a.begin >= w.begin || w.begin > bk.end {
				t.Fatalf("rank %d step %d: bucket 0 all-reduce [%.0f, %.0f] µs does not start inside backward [%.0f, %.0f] before autograd returned (%.0f)",
					pid, s, a.begin, a.end, bk.begin, bk.end, w.begin)
			}
			hidden += math.Min(a.end, w.begin) - a.begin
			busy += a.end - a.begin
			backward += w.begin - bk.begin
		}
		t.Logf("rank %d: bucket 0's all-reduce overlaps backward in all %d steps: %.0f µs of its %.0f µs per step ran while autograd computed (%.0f µs per step)",
			pid, steps, hidden/float64(steps), busy/float64(steps), backward/float64(steps))
	}
}

// TestCheckTraceOverlapRejects checks that checkTraceOverlap would notice
// an all-reduce launched only after autograd returned.
func TestCheckTraceOverlapRejects(t *testing.T) {
	dir := t.TempDir()
	tr, err := trace.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	bk := tr.Begin(trace.Compute, "backward")
	time.Sleep(time.Millisecond)
	w := tr.Begin(trace.Compute, "wait for gradients")
	time.Sleep(time.Millisecond)
	a := tr.Begin(trace.Comm, "all_reduce bucket 0") // launched after autograd returned
	time.Sleep(time.Millisecond)
	a.End()
	w.End()
	bk.End()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	ft := &fatalRecorder{T: t}
	func() {
		defer func() { recover() }()
		checkTraceOverlap(ft, dir, 1, 1)
	}()
	if !strings.Contains(ft.msg, "does not start inside backward") {
		t.Fatalf("checkTraceOverlap on a serialised step: %q, want a failure", ft.msg)
	}
}

// testReporter is the part of testing.TB that checkTraceOverlap uses.
type testReporter interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// fatalRecorder is a *testing.T whose Fatalf records the message and
// unwinds with a panic instead of ending the test.
type fatalRecorder struct {
	*testing.T
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f.msg)
}
