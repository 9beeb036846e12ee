package nccl_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/device/cudatensor"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// gpuDevice skips t unless NCCL and cuda:0 are usable, and returns cuda:0.
func gpuDevice(t *testing.T) tensor.Device {
	t.Helper()
	gpu(t)
	if err := cudatensor.Init(tensor.CUDA(0)); err != nil {
		t.Skipf("skipped: cuda:0 cannot be opened: %v", err)
	}
	return tensor.CUDA(0)
}

// TestGPUInitPicksNCCL: a program on cuda:0 that names no backend gets
// nccl from Init.
func TestGPUInitPicksNCCL(t *testing.T) {
	dev := gpuDevice(t)
	pg, err := distributed.Init(context.Background(), distributed.Options{Device: dev, WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	if name := distributed.BackendName(pg); name != "nccl" {
		t.Errorf("Init on %v chose %q, want nccl", dev, name)
	}
}

// gpuWorldOfOne returns the device (or skips t without one) and a group
// of one rank on it, with a minute's op timeout, closed when t ends.
func gpuWorldOfOne(t *testing.T) (tensor.Device, distributed.ProcessGroup) {
	t.Helper()
	dev := gpuDevice(t)
	pg, err := distributed.Init(context.Background(), distributed.Options{Device: dev, WorldSize: 1, Group: distributed.GroupOptions{Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	return dev, pg
}

// TestGPUTensorCollectives: AllReduceTensor and BroadcastTensor of CUDA
// tensors run on their memory (world 1: NCCL's kernels on the tensors'
// own addresses), after the compute stream's work that wrote them.
func TestGPUTensorCollectives(t *testing.T) {
	dev, pg := gpuWorldOfOne(t)
	ctx := context.Background()
	const n = 1<<20 + 3
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i%1000) - 500
	}
	x := tensor.FromSlice(src, n).To(dev)
	for _, op := range []distributed.ReduceOp{distributed.Sum, distributed.Avg} {
		// y is written by the compute stream just before the collective
		// reads it: the group must order itself after that stream.
		y := tensor.Scale(x, 2)
		if err := distributed.AllReduceTensor(ctx, pg, y, op).Wait(); err != nil {
			t.Fatal(err)
		}
		got := y.To(tensor.CPU).Data()
		for i := range got {
			if got[i] != 2*src[i] {
				t.Fatalf("%v: element %d = %v, want %v", op, i, got[i], 2*src[i])
			}
		}
	}
	if err := distributed.BroadcastTensor(ctx, pg, x, 0).Wait(); err != nil {
		t.Fatal(err)
	}
	if got := x.To(tensor.CPU).Data(); got[n-1] != src[n-1] {
		t.Errorf("broadcast changed element %d: %v, want %v", n-1, got[n-1], src[n-1])
	}
}

// TestGPUDDPWorld1: ddp over the nccl backend with the model on cuda:0
// (buckets on the device, gradients views of them) trains a small GPT for
// 5 AdamW steps with clipping equal to the same model trained on the CPU
// without ddp, within 1e-4 normwise per parameter (fp32, TF32 off). At
// world 1 ddp's all-reduce is the identity and issues nothing: the
// all-reduce of device buckets between ranks needs two GPUs.
func TestGPUDDPWorld1(t *testing.T) {
	dev, pg := gpuWorldOfOne(t)
	ctx := context.Background()
	cfg := models.GPTConfig{Vocab: 64, Ctx: 16, NLayer: 2, D: 32, NHead: 4}
	const B, T, steps = 4, 16, 5
	build := func() *models.GPT {
		g, err := models.NewGPT(rand.New(rand.NewPCG(1, 2)), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	batch := func(s int) (idx, tgt []int64) {
		r := rand.New(rand.NewPCG(uint64(s), 3))
		for range B * T {
			idx, tgt = append(idx, int64(r.IntN(cfg.Vocab))), append(tgt, int64(r.IntN(cfg.Vocab)))
		}
		return idx, tgt
	}
	newOpt := func(g *models.GPT) optim.Optimizer {
		o, err := optim.NewAdamW([]optim.Group{{Params: nn.Parameters(g), LR: 1e-2, WeightDecay: 0.1}}, optim.AdamDefaults())
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	cpu := build()
	copt := newOpt(cpu)
	for s := range steps {
		idx, tgt := batch(s)
		autograd.Backward(cpu.Loss(cpu.Forward(idx, B, T), tgt))
		if _, err := optim.ClipGradNorm(nn.Parameters(cpu), 1, 2); err != nil {
			t.Fatal(err)
		}
		copt.Step()
		copt.ZeroGrad()
	}
	g := build()
	nn.To(g, dev)
	m, err := ddp.WrapModule(ctx, g, pg, ddp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	gopt := newOpt(g)
	for s := range steps {
		idx, tgt := batch(s)
		out, err := m.Call(ctx, func() *autograd.Var { return g.Forward(idx, B, T) })
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(ctx, g.Loss(out, tgt)); err != nil {
			t.Fatal(err)
		}
		for _, np := range g.NamedParameters() {
			if np.Param.Grad == nil || np.Param.Grad.Device() != dev {
				t.Fatalf("step %d: %s's gradient is not on %v", s, np.Name, dev)
			}
		}
		if _, err := optim.ClipGradNorm(nn.Parameters(g), 1, 2); err != nil {
			t.Fatal(err)
		}
		gopt.Step()
		gopt.ZeroGrad()
	}
	want, got := nn.StateDict(cpu), nn.StateDict(g)
	worst := 0.0
	for k, w := range want {
		wd, gd := w.Contiguous().Data(), got[k].To(tensor.CPU).Contiguous().Data()
		var d, nrm float64
		for i := range wd {
			e := float64(gd[i]) - float64(wd[i])
			d += e * e
			nrm += float64(wd[i]) * float64(wd[i])
		}
		rel := math.Sqrt(d) / math.Max(math.Sqrt(nrm), 1e-12)
		worst = math.Max(worst, rel)
		if rel > 1e-4 {
			t.Errorf("%s: ‖cuda − cpu‖/‖cpu‖ = %.3g after %d steps, want ≤ 1e-4", k, rel, steps)
		}
	}
	t.Logf("ddp world 1 on %v vs the CPU: worst parameter %.3g after %d steps", dev, worst, steps)
}
