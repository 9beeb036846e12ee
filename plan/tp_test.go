package plan_test

import (
	"math"
	"strings"
	"testing"

	"github.com/cohortml/cohort/plan"
)

// GPT-mini at tp 2 pays, per step of one microbatch of 32 sequences, the
// all-reduces cohort's tp runs: per block two forward (attention's and
// the MLP's g) and two backward (their f), the vocabulary-parallel
// embedding's forward one and the head's f backward, all of the
// microbatch's activations (32·64·128 floats); the loss's row maxima
// (4 bytes a token) and sums (16), and the gradient norm (8 bytes).
func TestTPCollectives(t *testing.T) {
	m, _ := plan.NamedModel("gpt")
	m.GlobalBatch = 32
	fab, _ := plan.BuiltinFabric("local")
	l := plan.Layout{DP: 1, PP: 1, TP: 2, Shard: "none", Microbatches: 1, Schedule: "none", Virtual: 1}
	g := plan.Group{PerNode: 2, Nodes: 1}
	act := fab.AllReduceTime(g, 32*64*128*4)
	small := fab.AllReduceTime(g, 32*64*4) + fab.AllReduceTime(g, 32*64*16) + fab.AllReduceTime(g, 8)
	for _, tc := range []struct {
		name  string
		point []plan.TPPoint
		want  float64
	}{
		{"fabric", nil, (4*4+2)*act + small},
		// measured: 1 ms more per activation all-reduce, 0.1 ms per small one
		{"measured", []plan.TPPoint{{Ranks: 2, Compute: 1, CollectiveSeconds: 1e-3, SmallSeconds: 1e-4}}, (4*4+2)*(act+1e-3) + small + 3e-4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := measuredDevice(0)
			dev.TensorParallel = tc.point
			p, err := plan.Predict(&plan.Env{Model: m, Device: dev, Fabric: fab, Cluster: plan.Cluster{Nodes: 1, ProcsPerNode: 2}}, l)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(p.Times.TP-tc.want) > 1e-12 {
				t.Fatalf("tensor-parallel time %v s, want %v s", p.Times.TP, tc.want)
			}
		})
	}
}

// MeasureTP's figures make the prediction give back the measured compute
// and collectives; the compute factor scales every pass.
func TestMeasureTP(t *testing.T) {
	m, _ := plan.NamedModel("gpt")
	m.GlobalBatch = 32
	fab, _ := plan.BuiltinFabric("local")
	dev := measuredDevice(0)
	env := &plan.Env{Model: m, Device: dev, Fabric: fab, Cluster: plan.Cluster{Nodes: 1, ProcsPerNode: 2, Cores: 2}}
	l := plan.Layout{DP: 1, PP: 1, TP: 2, Shard: "none", Microbatches: 1, Schedule: "none", Virtual: 1}
	bare, err := plan.Predict(env, l)
	if err != nil {
		t.Fatal(err)
	}
	g := plan.Group{PerNode: 2, Nodes: 1}
	run := plan.TPRun{ComputeSeconds: 3 * bare.Times.Compute, CollectiveSeconds: fab.AllReduceTime(g, 1<<20) + 2e-3, CollectiveBytes: 1 << 20,
		SmallSeconds: fab.AllReduceTime(g, 10<<10) + 1e-4, SmallBytes: 10 << 10}
	pt, err := plan.MeasureTP(env, l, run)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(pt.Compute-3) > 1e-9 || math.Abs(pt.CollectiveSeconds-2e-3) > 1e-12 || math.Abs(pt.SmallSeconds-1e-4) > 1e-12 || pt.Ranks != 2 {
		t.Fatalf("MeasureTP = %+v, want compute 3, 2 ms and 0.1 ms beyond the fabric at 2 ranks", pt)
	}
	plan.AddTP(dev, pt)
	got, err := plan.Predict(env, l)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.Times.Compute-3*bare.Times.Compute) > 1e-9*bare.Times.Compute {
		t.Errorf("compute %v s, want 3× %v s", got.Times.Compute, bare.Times.Compute)
	}
	if want := bare.Times.TP + 18*2e-3 + 3*1e-4; math.Abs(got.Times.TP-want) > 1e-7 {
		t.Errorf("tensor-parallel time %v s, want %v s (18 activation and 3 small all-reduces slower)", got.Times.TP, want)
	}
	// measuring again on the device with the figures gives the same
	if again, err := plan.MeasureTP(env, l, run); err != nil || math.Abs(again.Compute-pt.Compute) > 1e-9 {
		t.Errorf("MeasureTP on a device with figures = %+v, %v; want %+v", again, err, pt)
	}
	// tp 1 layouts and pure data parallelism are unchanged
	dp := plan.Layout{DP: 2, PP: 1, TP: 1, Shard: "none", Microbatches: 1, Schedule: "none", Virtual: 1}
	env.Model.GlobalBatch = 64
	a, _ := plan.Predict(env, dp)
	dev.TensorParallel = nil
	b, _ := plan.Predict(env, dp)
	if a.Times.Step != b.Times.Step {
		t.Errorf("dp 2: step %v s with tensor-parallel figures, %v s without: want equal", a.Times.Step, b.Times.Step)
	}
	for _, bad := range []plan.TPRun{{ComputeSeconds: 0}, {ComputeSeconds: 1, CollectiveSeconds: -1}, {ComputeSeconds: math.Inf(1)}} {
		if _, err := plan.MeasureTP(env, l, bad); err == nil {
			t.Errorf("MeasureTP(%+v): want an error", bad)
		}
	}
	if _, err := plan.MeasureTP(env, dp, run); err == nil {
		t.Error("MeasureTP of a layout without tensor parallelism: want an error")
	}
}

func TestDeviceTP(t *testing.T) {
	d := measuredDevice(0)
	if p := d.TP(4); p.Compute != 1 || p.CollectiveSeconds != 0 {
		t.Fatalf("no figures: %+v, want compute 1 and no extra time", p)
	}
	plan.AddTP(d, plan.TPPoint{Ranks: 4, Compute: 3, CollectiveSeconds: 3e-3})
	plan.AddTP(d, plan.TPPoint{Ranks: 2, Compute: 5, CollectiveSeconds: 1e-3}) // added out of order
	plan.AddTP(d, plan.TPPoint{Ranks: 2, Compute: 2, CollectiveSeconds: 1e-3}) // replaces
	for _, tc := range []struct {
		ranks      int
		c, seconds float64
	}{{1, 1, 0}, {2, 2, 1e-3}, {3, 2.5, 2e-3}, {4, 3, 3e-3}, {8, 3, 3e-3}} {
		if p := d.TP(tc.ranks); math.Abs(p.Compute-tc.c) > 1e-12 || math.Abs(p.CollectiveSeconds-tc.seconds) > 1e-12 {
			t.Errorf("TP(%d) = %+v, want compute %v, %v s", tc.ranks, p, tc.c, tc.seconds)
		}
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	for field, pts := range map[string][]plan.TPPoint{
		"tensor_parallel[0].ranks":              {{Ranks: 1, Compute: 1}},
		"tensor_parallel[1].ranks":              {{Ranks: 4, Compute: 1}, {Ranks: 2, Compute: 1}},
		"tensor_parallel[0].compute":            {{Ranks: 2, Compute: 0}},
		"tensor_parallel[0].collective_seconds": {{Ranks: 2, Compute: 1, CollectiveSeconds: -1}},
		"tensor_parallel[0].small_seconds":      {{Ranks: 2, Compute: 1, SmallSeconds: math.NaN()}},
	} {
		d.TensorParallel = pts
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%+v: error %v, want one naming %s", pts, err, field)
		}
	}
}
