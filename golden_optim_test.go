package cohort_test

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// optimGoldenRunners covers optimizers, gradient clipping and LR schedules.
func optimGoldenRunners() map[string]goldenRunner {
	return map[string]goldenRunner{
		"optimizer":      runOptimizerGolden,
		"lr_schedule":    runScheduleGolden,
		"clip_grad_norm": runClipGolden,
	}
}

// attrF returns a numeric attribute, or def when absent.
func optimAttr(t *testing.T, c *goldenCase, key string, def float64) float64 {
	t.Helper()
	if !has(c.Attrs, key) {
		return def
	}
	return decode[float64](t, c.Attrs, key)
}

// runOptimizerGolden replays K steps with the recorded gradients and checks
// the parameter after each one.
func runOptimizerGolden(t *testing.T, c *goldenCase) {
	p0 := decode[goldenTensor](t, c.Inputs, "param")
	grads := decode[[]goldenTensor](t, c.Inputs, "grads")
	want := decode[[]goldenTensor](t, c.Outputs, "params_after_each_step")
	if len(want) != len(grads) {
		t.Fatalf("golden: %d gradients but %d recorded parameters", len(grads), len(want))
	}
	p := autograd.NewVar(tensor.FromSlice(f32s(p0.Data), p0.Shape...), true)
	groups := []optim.Group{{Params: []*autograd.Var{p}, LR: optimAttr(t, c, "lr", 0), WeightDecay: optimAttr(t, c, "weight_decay", 0)}}
	var opt optim.Optimizer
	var err error
	switch kind := decode[string](t, c.Attrs, "kind"); kind {
	case "sgd":
		o := optim.SGDOptions{Momentum: optimAttr(t, c, "momentum", 0), Dampening: optimAttr(t, c, "dampening", 0)}
		if has(c.Attrs, "nesterov") {
			o.Nesterov = decode[bool](t, c.Attrs, "nesterov")
		}
		opt, err = optim.NewSGD(groups, o)
	case "adam", "adamw":
		o := optim.AdamOptions{Beta1: optimAttr(t, c, "beta1", 0.9), Beta2: optimAttr(t, c, "beta2", 0.999), Eps: optimAttr(t, c, "eps", 1e-8)}
		if has(c.Attrs, "amsgrad") {
			o.AMSGrad = decode[bool](t, c.Attrs, "amsgrad")
		}
		if kind == "adam" {
			opt, err = optim.NewAdam(groups, o)
		} else {
			opt, err = optim.NewAdamW(groups, o)
		}
	default:
		t.Fatalf("golden: unknown optimizer kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	for k, g := range grads {
		opt.ZeroGrad()
		p.Grad = tensor.FromSlice(f32s(g.Data), g.Shape...)
		opt.Step()
		checkClose(t, "param after step "+strconv.Itoa(k+1), p.Value.Data(), want[k])
	}
}

// runScheduleGolden checks the learning rate in force at each step.
func runScheduleGolden(t *testing.T, c *goldenCase) {
	want := decode[[]float64](t, c.Outputs, "lr_per_step")
	var s optim.Schedule
	switch kind := decode[string](t, c.Attrs, "kind"); kind {
	case "step":
		s = optim.StepLR{StepSize: int(optimAttr(t, c, "step_size", 0)), Gamma: optimAttr(t, c, "gamma", 0.1)}
	case "cosine":
		s = optim.CosineAnnealingLR{TMax: int(optimAttr(t, c, "t_max", 0)), EtaMin: optimAttr(t, c, "eta_min", 0)}
	case "linear":
		s = optim.LinearLR{StartFactor: optimAttr(t, c, "start_factor", 1.0/3), EndFactor: optimAttr(t, c, "end_factor", 1),
			TotalIters: int(optimAttr(t, c, "total_iters", 5))}
	default:
		t.Fatalf("golden: unknown schedule kind %q", kind)
	}
	p := autograd.NewVar(tensor.New(1), true)
	opt, err := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{p}, LR: decode[float64](t, c.Attrs, "base_lr")}}, optim.SGDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sch, err := optim.NewScheduler(opt, s)
	if err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		checkScalar(t, "lr at step "+strconv.Itoa(k), opt.LR(0), w)
		opt.Step()
		sch.Step()
	}
}

// runClipGolden clips a list of gradients by their joint norm.
func runClipGolden(t *testing.T, c *goldenCase) {
	grads := decode[[]goldenTensor](t, c.Inputs, "grads")
	want := decode[[]goldenTensor](t, c.Outputs, "clipped")
	normType := 2.0
	if has(c.Attrs, "norm_type") {
		var v any
		if err := json.Unmarshal(c.Attrs["norm_type"], &v); err != nil {
			t.Fatalf("golden: norm_type: %v", err)
		}
		switch v := v.(type) {
		case float64:
			normType = v
		case string:
			if !strings.EqualFold(v, "inf") {
				t.Fatalf("golden: norm_type %q", v)
			}
			normType = math.Inf(1)
		}
	}
	ps := make([]*autograd.Var, len(grads))
	for i, g := range grads {
		ps[i] = autograd.NewVar(tensor.New(g.Shape...), true)
		ps[i].Grad = tensor.FromSlice(f32s(g.Data), g.Shape...)
	}
	total, err := optim.ClipGradNorm(ps, decode[float64](t, c.Attrs, "max_norm"), normType)
	if err != nil {
		t.Fatal(err)
	}
	checkScalar(t, "total_norm", total, decode[float64](t, c.Outputs, "total_norm"))
	if len(want) != len(ps) {
		t.Fatalf("golden: %d gradients but %d clipped", len(ps), len(want))
	}
	for i, p := range ps {
		checkClose(t, "clipped["+strconv.Itoa(i)+"]", p.Grad.Data(), want[i])
	}
}
