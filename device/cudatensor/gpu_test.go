package cudatensor

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/device/alloc"
	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/devicetest"
	"github.com/cohortml/cohort/tensor/tensortest"
)

// gpu skips the test, saying why, when cuda:0 cannot be opened.
func gpu(t *testing.T) tensor.Device {
	t.Helper()
	dev := tensor.CUDA(0)
	if err := Init(dev); err != nil {
		t.Skipf("skipped: no usable GPU: %v", err)
	}
	st, _ := stateOf(dev)
	t.Logf("device %s (%s)", st.ctx.Device, st.arch)
	return dev
}

// TestGPUConformance is the conformance suite on cuda:0: every op against
// its CPU twin on fresh random inputs, ‖gpu − cpu‖/‖cpu‖ ≤ 1e-5 in fp32
// with TF32 off.
func TestGPUConformance(t *testing.T) {
	devicetest.Run(t, gpu(t))
}

// run is one model, loss and optimizer on one device.
type run struct {
	m    nn.Module
	opt  optim.Optimizer
	loss func(step int) *autograd.Var
}

func (r *run) step(t *testing.T, s int) float32 {
	t.Helper()
	r.opt.ZeroGrad()
	l := r.loss(s)
	autograd.Backward(l)
	if _, err := optim.ClipGradNorm(nn.Parameters(r.m), 1, 2); err != nil {
		t.Fatal(err)
	}
	r.opt.Step()
	return l.Value.To(tensor.CPU).Item()
}

// trainBoth trains the model build makes on the CPU and on dev for steps
// steps and bounds the relative difference of each loss and, at the end,
// of every parameter (normwise) by tol.
func trainBoth(t *testing.T, dev tensor.Device, steps int, tol float64, build func(dev tensor.Device) *run) *run {
	t.Helper()
	cpu, gr := build(tensor.CPU), build(dev)
	for s := range steps {
		lc, lg := cpu.step(t, s), gr.step(t, s)
		t.Logf("step %d: loss %.6f on the CPU, %.6f on %v", s, lc, lg, dev)
		if d := math.Abs(float64(lc - lg)); d > tol*math.Abs(float64(lc)) {
			t.Errorf("step %d: loss %g on %v, %g on the CPU (relative %.2g > %g)", s, lg, dev, lc, d/math.Abs(float64(lc)), tol)
		}
	}
	pa, pb := cpu.m.NamedParameters(), gr.m.NamedParameters()
	worst := 0.0
	for i := range pa {
		rel := tensortest.RelErr(pb[i].Param.Value.To(tensor.CPU).Values(), pa[i].Param.Value.Values())
		worst = max(worst, rel)
		if rel > tol {
			t.Errorf("%s: ‖gpu − cpu‖/‖cpu‖ = %.3g > %g after %d steps", pa[i].Name, rel, tol, steps)
		}
	}
	t.Logf("worst parameter ‖gpu − cpu‖/‖cpu‖ after %d steps: %.3g", steps, worst)
	return gr
}

func adamW(t *testing.T, m nn.Module) optim.Optimizer {
	opt, err := optim.NewAdamW([]optim.Group{{Params: nn.Parameters(m), LR: 1e-3, WeightDecay: 0.01}}, optim.AdamDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

// TestGPUTrainMLP trains the anchor MLP (batch 64, AdamW, clipping) for 5
// steps on cuda:0 and on the CPU: losses and parameters within 1e-4
// relative (each op is within 1e-5; five steps of AdamW compound them).
func TestGPUTrainMLP(t *testing.T) {
	dev := gpu(t)
	const B = 64
	rng := rand.New(rand.NewPCG(1, 2))
	xs := make([]*tensor.Tensor, 5)
	ys := make([][]int64, 5)
	for i := range xs {
		xs[i] = tensor.New(B, 784)
		xs[i].FillNormal(rng, 0, 1)
		ys[i] = make([]int64, B)
		for j := range ys[i] {
			ys[i][j] = int64(rng.IntN(10))
		}
	}
	trainBoth(t, dev, 5, 1e-4, func(dev tensor.Device) *run {
		m := models.MLP(rand.New(rand.NewPCG(3, 4)))
		nn.To(m, dev)
		return &run{m: m, opt: adamW(t, m), loss: func(s int) *autograd.Var {
			return autograd.CrossEntropy(m.Forward(autograd.NewVar(xs[s].To(dev), false)), ys[s], autograd.CrossEntropyOptions{})
		}}
	})
}

// TestGPUTrainGPTMini trains GPT-mini (batch 8 × 64, AdamW, clipping) for
// 5 steps on cuda:0 and on the CPU, within 1e-4 relative, then reports
// the allocator's peak for one more step.
func TestGPUTrainGPTMini(t *testing.T) {
	dev := gpu(t)
	cfg := models.GPTMini()
	const B, T = 8, 64
	rng := rand.New(rand.NewPCG(5, 6))
	ids := make([][]int64, 6)
	for i := range ids {
		ids[i] = make([]int64, 2*B*T)
		for j := range ids[i] {
			ids[i][j] = int64(rng.IntN(cfg.Vocab))
		}
	}
	gr := trainBoth(t, dev, 5, 1e-4, func(dev tensor.Device) *run {
		g, err := models.NewGPT(rand.New(rand.NewPCG(7, 8)), cfg)
		if err != nil {
			t.Fatal(err)
		}
		nn.To(g, dev)
		return &run{m: g, opt: adamW(t, g), loss: func(s int) *autograd.Var {
			return g.Loss(g.Forward(ids[s][:B*T], B, T), ids[s][B*T:])
		}}
	})
	if err := ResetPeaks(dev); err != nil {
		t.Fatal(err)
	}
	gr.step(t, 5)
	st, err := Stats(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GPT-mini step (batch %d × %d): peak allocated %s, allocated %s, reserved %s (peak %s), %d device allocations",
		B, T, alloc.Bytes(st.PeakAllocatedBytes), alloc.Bytes(st.AllocatedBytes), alloc.Bytes(st.ReservedBytes), alloc.Bytes(st.PeakReservedBytes), st.DeviceAllocs)
}

// TestGPUOpenLocalRank: under a launcher, -device cuda opens LOCAL_RANK's
// GPU among the visible ones (cohort run --nproc-per-node gpu gives each
// worker its own), and a local rank beyond them is refused naming both
// counts. On one GPU only local rank 0 can be opened.
func TestGPUOpenLocalRank(t *testing.T) {
	gpu(t)
	n, err := cuda.Visible()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LOCAL_RANK", strconv.Itoa(n-1))
	dev, err := Open("cuda")
	if err != nil || dev != tensor.CUDA(n-1) {
		t.Errorf("Open(cuda) with LOCAL_RANK=%d of %d visible = %v, %v; want cuda:%d", n-1, n, dev, err, n-1)
	}
	t.Setenv("LOCAL_RANK", strconv.Itoa(n))
	if _, err := Open("cuda"); err == nil || !strings.Contains(err.Error(), "has no GPU of its own") {
		t.Errorf("Open(cuda) with LOCAL_RANK=%d of %d visible: %v, want a refusal", n, n, err)
	}
	t.Logf("%d visible GPU(s); local rank %d opens cuda:%d", n, n-1, n-1)
}
