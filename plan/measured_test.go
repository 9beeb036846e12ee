package plan_test

import (
	"math"
	"testing"

	"github.com/cohortml/cohort/plan"
)

// measuredDevice is a device as cohort plan profile writes it: one point
// of whole layers, the head at head of the blocks' rate.
func measuredDevice(head float64) *plan.Device {
	return &plan.Device{Name: "cpu", PeakFLOPs: map[string]float64{"fp32": 1e11}, MemoryBytes: 8 << 30, MemoryBandwidth: 1e10,
		Efficiency: []plan.EfficiencyPoint{{FLOPs: 1e8, Fraction: 1, Head: head}}, WholeLayer: true}
}

func predictGPT(t *testing.T, dev *plan.Device, cluster plan.Cluster, l plan.Layout) *plan.Prediction {
	t.Helper()
	m, _ := plan.NamedModel("gpt")
	fab, err := plan.BuiltinFabric("local")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Predict(&plan.Env{Model: m, Device: dev, Fabric: fab, Cluster: cluster}, l)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A slower head lengthens the last stage, which is the busiest: the
// pipeline's compute grows by the head's extra time per microbatch.
func TestHeadFraction(t *testing.T) {
	l := plan.Layout{DP: 1, PP: 2, TP: 1, Shard: "none", Microbatches: 8, Schedule: "1f1b", Virtual: 1}
	c := plan.Cluster{Nodes: 1, ProcsPerNode: 2}
	same, half := predictGPT(t, measuredDevice(0), c, l), predictGPT(t, measuredDevice(0.5), c, l)
	// GPT-mini's head, microbatches of 4: 2·(4·64)·128·256 FLOPs forward,
	// twice that backward, at 1e11 FLOP/s; at half the rate it takes as
	// long again.
	extra := 8 * 3 * 2 * 4 * 64 * 128 * 256 / 1e11
	if got := half.Times.Compute - same.Times.Compute; math.Abs(got-extra) > 1e-9 {
		t.Fatalf("head at half the rate: compute +%v s, want +%v s", got, extra)
	}
}

// Four ranks on two cores take twice as long to compute as four on four.
func TestCoresShared(t *testing.T) {
	l := plan.Layout{DP: 4, PP: 1, TP: 1, Shard: "none", Microbatches: 1, Schedule: "none", Virtual: 1}
	own := predictGPT(t, measuredDevice(0), plan.Cluster{Nodes: 1, ProcsPerNode: 4, Cores: 4}, l)
	shared := predictGPT(t, measuredDevice(0), plan.Cluster{Nodes: 1, ProcsPerNode: 4, Cores: 2}, l)
	if r := shared.Times.Compute / own.Times.Compute; math.Abs(r-2) > 1e-9 {
		t.Fatalf("4 ranks on 2 cores: compute %.3g× that on 4, want 2×", r)
	}
	if r := shared.Times.Optimizer / own.Times.Optimizer; math.Abs(r-2) > 1e-9 {
		t.Fatalf("4 ranks on 2 cores: optimizer %.3g× that on 4, want 2×", r)
	}
	unset := predictGPT(t, measuredDevice(0), plan.Cluster{Nodes: 1, ProcsPerNode: 4}, l)
	if unset.Times.Step != own.Times.Step {
		t.Fatalf("Cores 0: step %v, want one core per rank's %v", unset.Times.Step, own.Times.Step)
	}
}

// The optimizer's rate is the slowest rank's bytes per second outside
// the pipeline.
func TestMeasureOptimizer(t *testing.T) {
	m, _ := plan.NamedModel("gpt")
	rate, err := plan.MeasureOptimizer(m, []float64{1e-3, 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	// The last stage holds 2 blocks, the final LayerNorm and its copy of
	// the tied embedding: fewer than the first (2 blocks, the token and
	// position embeddings), so in the same time it moved fewer bytes per
	// second and sets the rate.
	blocks := int64(2 * (12*128*128 + 13*128))
	last := blocks + 2*128 + 256*128
	if want := float64(last*28) / 1e-3; math.Abs(rate-want) > 1e-6*want {
		t.Fatalf("rate %.4g bytes/s, want %.4g (the last stage's %d parameters × 28 bytes in 1 ms)", rate, want, last)
	}
	if _, err := plan.MeasureOptimizer(m, []float64{1e-3, 0}); err == nil {
		t.Fatal("a rank with no time outside: want an error")
	}
}
