package plan_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cohortml/cohort/plan"
)

// megatronRow is one row of Narayanan et al. 2021, Table 1.
type megatronRow struct {
	Model     string  `json:"model"`
	Billions  float64 `json:"billions"`
	TP        int     `json:"tp"`
	PP        int     `json:"pp"`
	GPUs      int     `json:"gpus"`
	Published float64 `json:"published_tflops"`
}

// megatronAim is the worst relative error of predicted against published
// teraFLOP/s per GPU that the test holds the model to.
const megatronAim = 0.20

// TestMegatron2021 predicts every row of the paper's Table 1 with the
// repository's A100 device and DGX A100 fabric, one set of figures for
// all rows, at the published TP and PP (DP = GPUs/(TP·PP)); the
// microbatch count and the schedule (1F1B or interleaved, the paper's)
// are the planner's best for that layout.
func TestMegatron2021(t *testing.T) {
	dir := filepath.Join("testdata", "megatron2021")
	data, err := os.ReadFile(filepath.Join(dir, "table.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []megatronRow
	if err := json.Unmarshal(data, &rows); err != nil {
		t.Fatal(err)
	}
	dev, err := plan.BuiltinDevice("a100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	fab, err := plan.BuiltinFabric("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	worst, worstRow := 0.0, ""
	for _, r := range rows {
		md, err := os.ReadFile(filepath.Join(dir, r.Model))
		if err != nil {
			t.Fatal(err)
		}
		m, err := plan.ParseModel(md)
		if err != nil {
			t.Fatal(err)
		}
		if got := float64(m.Params()) / 1e9; math.Abs(got-r.Billions)/r.Billions > 0.03 {
			t.Errorf("%s: %.1fB parameters, the paper has %.1fB", r.Model, got, r.Billions)
		}
		env := &plan.Env{Model: m, Device: dev, Fabric: fab, Cluster: plan.Cluster{Nodes: r.GPUs / 8, ProcsPerNode: 8}}
		best, err := bestAt(env, r.TP, r.PP)
		if err != nil {
			t.Fatalf("%s: %v", r.Model, err)
		}
		got := best.FLOPsPerRank / 1e12
		rel := (got - r.Published) / r.Published
		if math.Abs(rel) > math.Abs(worst) {
			worst, worstRow = rel, r.Model
		}
		fmt.Fprintf(&b, "%-7s tp %d pp %2d dp %3d  mb %d m %4d %-13s predicted %5.1f published %5.1f TFLOP/s per GPU  error %+5.1f%%  (bubble %4.1f%% tp %4.1f%% dp %4.1f%% of step, %5.1f GiB)\n",
			strings.TrimSuffix(r.Model, ".json"), r.TP, r.PP, best.DP, best.MicroBatch, best.Microbatches, best.ScheduleName(), got, r.Published, 100*rel,
			100*best.Times.Bubble/best.Times.Step, 100*best.Times.TP/best.Times.Step, 100*best.Times.DP/best.Times.Step, float64(best.Memory.Total)/(1<<30))
	}
	fmt.Fprintf(&b, "worst error %+.1f%% (%s)\n", 100*worst, worstRow)
	t.Log("\n" + b.String())
	if math.Abs(worst) > megatronAim {
		t.Errorf("worst error %+.1f%% (%s) exceeds %.0f%%", 100*worst, worstRow, 100*megatronAim)
	}
}

// bestAt returns the fastest fitting layout with the given tp and pp, no
// sharding, under 1F1B or interleaved 1F1B.
func bestAt(env *plan.Env, tp, pp int) (*plan.Prediction, error) {
	var best *plan.Prediction
	for _, l := range env.Layouts() {
		if l.TP != tp || l.PP != pp || l.Shard != "none" || (pp > 1 && l.Schedule != "1f1b" && l.Schedule != "interleaved") {
			continue
		}
		p, err := plan.Predict(env, l)
		if err != nil {
			return nil, err
		}
		if p.Fits && (best == nil || p.TokensPerSec > best.TokensPerSec) {
			best = p
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no layout with tp %d pp %d fits", tp, pp)
	}
	return best, nil
}
