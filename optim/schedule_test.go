package optim_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

func TestScheduleValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    optim.Schedule
		want string // "" means valid
	}{
		{"step_ok", optim.StepLR{StepSize: 3, Gamma: 0.1}, ""},
		{"step_zero_size", optim.StepLR{Gamma: 0.1}, "optim: StepLR: StepSize = 0, want >= 1"},
		{"step_negative_gamma", optim.StepLR{StepSize: 1, Gamma: -0.5}, "optim: StepLR: Gamma = -0.5"},
		{"cosine_ok", optim.CosineAnnealingLR{TMax: 10}, ""},
		{"cosine_zero_tmax", optim.CosineAnnealingLR{}, "optim: CosineAnnealingLR: TMax = 0, want >= 1"},
		{"cosine_nan_eta", optim.CosineAnnealingLR{TMax: 1, EtaMin: math.NaN()}, "EtaMin = NaN"},
		{"linear_ok", optim.LinearLR{StartFactor: 0.1, EndFactor: 1, TotalIters: 5}, ""},
		{"linear_zero_start", optim.LinearLR{EndFactor: 1, TotalIters: 5}, "optim: LinearLR: StartFactor = 0 is outside (0, 1]"},
		{"linear_end_above_one", optim.LinearLR{StartFactor: 0.5, EndFactor: 2, TotalIters: 5}, "EndFactor = 2 is outside [0, 1]"},
		{"linear_no_iters", optim.LinearLR{StartFactor: 0.5, EndFactor: 1}, "TotalIters = 0, want >= 1"},
		{"sequential_ok", optim.Sequential{Schedules: []optim.Schedule{optim.LinearLR{StartFactor: 0.1, EndFactor: 1, TotalIters: 2}, optim.CosineAnnealingLR{TMax: 5}}, Milestones: []int{2}}, ""},
		{"sequential_empty", optim.Sequential{}, "optim: Sequential: 0 schedules need 0 milestones, got 0"},
		{"sequential_milestone_count", optim.Sequential{Schedules: []optim.Schedule{optim.CosineAnnealingLR{TMax: 5}, optim.CosineAnnealingLR{TMax: 5}}}, "2 schedules need 1 milestones, got 0"},
		{"sequential_decreasing", optim.Sequential{Schedules: []optim.Schedule{optim.CosineAnnealingLR{TMax: 5}, optim.CosineAnnealingLR{TMax: 5}, optim.CosineAnnealingLR{TMax: 5}}, Milestones: []int{4, 4}}, "Milestones[1] = 4; milestones must be strictly increasing"},
		{"sequential_nil_child", optim.Sequential{Schedules: []optim.Schedule{optim.CosineAnnealingLR{TMax: 5}, nil}, Milestones: []int{3}}, "Schedules[1] is nil"},
		{"sequential_bad_child", optim.Sequential{Schedules: []optim.Schedule{optim.StepLR{}, optim.CosineAnnealingLR{TMax: 5}}, Milestones: []int{3}}, "optim: Sequential: Schedules[0]: optim: StepLR: StepSize = 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !errors.Is(err, optim.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one wrapping ErrInvalid containing %q", err, tc.want)
			}
			p := autograd.NewVar(tensor.New(1), true)
			opt, _ := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{p}, LR: 0.1}}, optim.SGDOptions{})
			if _, err := optim.NewScheduler(opt, tc.s); err == nil {
				t.Fatal("NewScheduler accepted an invalid schedule")
			}
		})
	}
}

func TestScheduleValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    optim.Schedule
		want []float64 // at steps 0, 1, …
	}{
		{"step", optim.StepLR{StepSize: 2, Gamma: 0.5}, []float64{1, 1, 0.5, 0.5, 0.25}},
		{"cosine", optim.CosineAnnealingLR{TMax: 2, EtaMin: 0.2}, []float64{1, 0.6, 0.2, 0.6, 1}},
		{"linear", optim.LinearLR{StartFactor: 0.5, EndFactor: 1, TotalIters: 2}, []float64{0.5, 0.75, 1, 1}},
		{"sequential", optim.Sequential{Schedules: []optim.Schedule{optim.LinearLR{StartFactor: 0.5, EndFactor: 1, TotalIters: 2},
			optim.StepLR{StepSize: 1, Gamma: 0.5}}, Milestones: []int{2}}, []float64{0.5, 0.75, 1, 0.5, 0.25}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for step, w := range tc.want {
				if got := tc.s.LR(1, step); math.Abs(got-w) > 1e-15 {
					t.Errorf("LR(1, %d) = %v, want %v", step, got, w)
				}
			}
		})
	}
}

// A scheduler rebuilt from a state dict continues where the saved one was,
// even when created after the optimizer's lr had already been scheduled.
func TestSchedulerStateDict(t *testing.T) {
	build := func(lr float64) (*optim.SGD, *optim.Scheduler) {
		t.Helper()
		p := autograd.NewVar(tensor.New(1), true)
		opt, err := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{p}, LR: lr}}, optim.SGDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sch, err := optim.NewScheduler(opt, optim.CosineAnnealingLR{TMax: 10})
		if err != nil {
			t.Fatal(err)
		}
		return opt, sch
	}
	a, sa := build(0.1)
	for range 4 {
		sa.Step()
	}
	sd := sa.StateDict()
	b, sb := build(a.LR(0)) // wrong base on purpose: the state dict fixes it
	if err := sb.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	if sb.Steps() != 4 || b.LR(0) != a.LR(0) {
		t.Fatalf("after load: steps %d lr %v, want 4 and %v", sb.Steps(), b.LR(0), a.LR(0))
	}
	sa.Step()
	sb.Step()
	if b.LR(0) != a.LR(0) {
		t.Fatalf("lr %v after resume, want %v", b.LR(0), a.LR(0))
	}

	for _, tc := range []struct {
		name, want string
		edit       func(sd *optim.StateDict)
	}{
		{"kind", `state dict is of kind "sgd", want "scheduler"`, func(sd *optim.StateDict) { sd.Kind = "sgd" }},
		{"tensor", `unknown tensor key "x"`, func(sd *optim.StateDict) { sd.Tensors["x"] = tensor.New(1) }},
		{"unknown", `unknown scalar key "base_lr.1"`, func(sd *optim.StateDict) { sd.Scalars["base_lr.1"] = 1 }},
		{"missing", `missing scalar key "step"`, func(sd *optim.StateDict) { delete(sd.Scalars, "step") }},
		{"negative_step", `key "step" = -1`, func(sd *optim.StateDict) { sd.Scalars["step"] = -1 }},
		{"bad_base", `key "base_lr.0" = -0.1`, func(sd *optim.StateDict) { sd.Scalars["base_lr.0"] = -0.1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := sa.StateDict()
			tc.edit(bad)
			steps, lr := sa.Steps(), a.LR(0)
			err := sa.LoadStateDict(bad)
			if err == nil || !errors.Is(err, optim.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one wrapping ErrInvalid containing %q", err, tc.want)
			}
			if sa.Steps() != steps || a.LR(0) != lr {
				t.Fatal("failed load changed the scheduler")
			}
		})
	}
}
