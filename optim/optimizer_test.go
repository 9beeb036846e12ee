package optim_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// wantErr fails t unless err wraps sentinel and its message contains want.
func wantErr(t *testing.T, err, sentinel error, want string) {
	t.Helper()
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one wrapping %v containing %q", err, sentinel, want)
	}
}

// builders make each optimizer kind over groups, with non-default options
// so that state dicts carry every buffer.
var builders = map[string]func([]optim.Group) (optim.Optimizer, error){
	"sgd": func(g []optim.Group) (optim.Optimizer, error) {
		return optim.NewSGD(g, optim.SGDOptions{Momentum: 0.9})
	},
	"adam": func(g []optim.Group) (optim.Optimizer, error) { return optim.NewAdam(g, optim.AdamDefaults()) },
	"adamw": func(g []optim.Group) (optim.Optimizer, error) {
		o := optim.AdamDefaults()
		o.AMSGrad = true
		return optim.NewAdamW(g, o)
	},
}

func TestConstructorErrors(t *testing.T) {
	rng := newRNG(1)
	p, q := newParam(rng, 2, 3), newParam(rng, 4)
	one := []optim.Group{{Params: []*autograd.Var{p}, LR: 0.1}}
	withValue := func(v *tensor.Tensor) *autograd.Var { return &autograd.Var{Value: v} }
	for _, tc := range []struct {
		name string
		make func() error
		want string
	}{
		{"sgd_negative_lr", func() error {
			_, err := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{p}, LR: -0.1}}, optim.SGDOptions{})
			return err
		}, "optim: NewSGD: group 0: lr = -0.1, want a finite value >= 0"},
		{"sgd_nan_lr", func() error {
			_, err := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{p}, LR: math.NaN()}}, optim.SGDOptions{})
			return err
		}, "group 0: lr = NaN"},
		{"sgd_negative_weight_decay_group_1", func() error {
			_, err := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{p}, LR: 0.1}, {Params: []*autograd.Var{q}, LR: 0.1, WeightDecay: -1}}, optim.SGDOptions{})
			return err
		}, "group 1: weight decay = -1"},
		{"sgd_negative_momentum", func() error {
			_, err := optim.NewSGD(one, optim.SGDOptions{Momentum: -0.5})
			return err
		}, "optim: NewSGD: momentum = -0.5"},
		{"sgd_nesterov_without_momentum", func() error {
			_, err := optim.NewSGD(one, optim.SGDOptions{Nesterov: true})
			return err
		}, "nesterov needs momentum > 0 and dampening = 0"},
		{"sgd_nesterov_with_dampening", func() error {
			_, err := optim.NewSGD(one, optim.SGDOptions{Nesterov: true, Momentum: 0.9, Dampening: 0.1})
			return err
		}, "dampening 0.1"},
		{"adam_beta1_one", func() error {
			o := optim.AdamDefaults()
			o.Beta1 = 1
			_, err := optim.NewAdam(one, o)
			return err
		}, "optim: NewAdam: beta1 = 1 is outside [0, 1)"},
		{"adamw_beta2_negative", func() error {
			o := optim.AdamDefaults()
			o.Beta2 = -0.1
			_, err := optim.NewAdamW(one, o)
			return err
		}, "optim: NewAdamW: beta2 = -0.1 is outside [0, 1)"},
		{"adam_negative_eps", func() error {
			o := optim.AdamDefaults()
			o.Eps = -1e-8
			_, err := optim.NewAdam(one, o)
			return err
		}, "eps = -1e-08"},
		{"no_groups", func() error {
			_, err := optim.NewAdam(nil, optim.AdamDefaults())
			return err
		}, "optim: NewAdam: no parameters to optimize"},
		{"empty_group", func() error {
			_, err := optim.NewSGD([]optim.Group{{LR: 0.1}}, optim.SGDOptions{})
			return err
		}, "no parameters"},
		{"nil_param", func() error {
			_, err := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{p, nil}, LR: 0.1}}, optim.SGDOptions{})
			return err
		}, "group 0 param 1 is nil"},
		{"nil_value", func() error {
			_, err := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{withValue(nil)}, LR: 0.1}}, optim.SGDOptions{})
			return err
		}, "group 0 param 0 has a nil Value"},
		{"duplicate_across_groups", func() error {
			_, err := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{p, q}, LR: 0.1}, {Params: []*autograd.Var{q}, LR: 0.2}}, optim.SGDOptions{})
			return err
		}, "group 1 param 0 is the same parameter as group 0 param 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.make()
			if err == nil {
				t.Fatal("no error")
			}
			wantErr(t, err, optim.ErrInvalid, tc.want)
		})
	}
}

// ZeroGrad must zero in place: gradients that are views into one flat
// bucket stay views into it.
func TestZeroGradKeepsViews(t *testing.T) {
	for kind, build := range builders {
		t.Run(kind, func(t *testing.T) {
			rng := newRNG(2)
			p, q := newParam(rng, 2, 3), newParam(rng, 4)
			bucket := randSlice(rng, 10, 1)
			p.Grad, q.Grad = tensor.FromSlice(bucket[:6], 2, 3), tensor.FromSlice(bucket[6:], 4)
			gp, gq := p.Grad, q.Grad
			opt, err := build([]optim.Group{{Params: []*autograd.Var{p, q}, LR: 0.1}})
			if err != nil {
				t.Fatal(err)
			}
			opt.Step()
			opt.ZeroGrad()
			if p.Grad != gp || q.Grad != gq {
				t.Fatal("ZeroGrad replaced a Grad tensor")
			}
			for i, v := range bucket {
				if v != 0 {
					t.Fatalf("bucket[%d] = %g after ZeroGrad", i, v)
				}
			}
			bucket[0], bucket[9] = 1, 2 // writes through the bucket reach the views
			if p.Grad.Data()[0] != 1 || q.Grad.Data()[3] != 2 {
				t.Fatal("Grad no longer views the bucket")
			}
		})
	}
}

func TestStepAllocatesNothing(t *testing.T) {
	for kind, build := range builders {
		t.Run(kind, func(t *testing.T) {
			rng := newRNG(3)
			p, q, r := newParam(rng, 16, 8), newParam(rng, 8), newParam(rng, 3)
			p.Grad, q.Grad = tensor.FromSlice(randSlice(rng, 128, 1), 16, 8), tensor.FromSlice(randSlice(rng, 8, 1), 8)
			opt, err := build([]optim.Group{{Params: []*autograd.Var{p}, LR: 0.01, WeightDecay: 0.1}, {Params: []*autograd.Var{q, r}, LR: 0.02}})
			if err != nil {
				t.Fatal(err)
			}
			if a := testing.AllocsPerRun(50, func() { opt.ZeroGrad(); opt.Step() }); a != 0 {
				t.Fatalf("Step+ZeroGrad allocated %v times per call", a)
			}
		})
	}
}

func TestGroupsHaveTheirOwnLR(t *testing.T) {
	rng := newRNG(4)
	p, q := newParam(rng, 3), newParam(rng, 3)
	p0, q0 := append([]float32(nil), p.Value.Data()...), append([]float32(nil), q.Value.Data()...)
	ones := []float32{1, 1, 1}
	p.Grad, q.Grad = tensor.FromSlice(append([]float32(nil), ones...), 3), tensor.FromSlice(append([]float32(nil), ones...), 3)
	opt, err := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{p}, LR: 0.5}, {Params: []*autograd.Var{q}, LR: 0}}, optim.SGDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opt.Step()
	for i := range 3 {
		if p.Value.Data()[i] != p0[i]-0.5 || q.Value.Data()[i] != q0[i] {
			t.Fatalf("element %d: p %g (was %g), q %g (was %g)", i, p.Value.Data()[i], p0[i], q.Value.Data()[i], q0[i])
		}
	}
	opt.SetLR(1, 0.25)
	if opt.LR(0) != 0.5 || opt.LR(1) != 0.25 || opt.NumGroups() != 2 {
		t.Fatalf("LR(0) = %v, LR(1) = %v, NumGroups = %d", opt.LR(0), opt.LR(1), opt.NumGroups())
	}
}

func TestProgrammerErrorsPanic(t *testing.T) {
	rng := newRNG(5)
	p := newParam(rng, 2, 3)
	opt, err := optim.NewAdam([]optim.Group{{Params: []*autograd.Var{p}, LR: 0.1}}, optim.AdamDefaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		f          func()
	}{
		{"grad_shape", "optim: Adam.Step: parameter 0: grad shape [3 2] differs from value shape [2 3]", func() {
			p.Grad = tensor.New(3, 2)
			opt.Step()
		}},
		{"set_negative_lr", "optim: Adam.SetLR: group 0: lr = -1", func() { opt.SetLR(0, -1) }},
		{"set_lr_bad_group", "optim: Adam.SetLR: group 1 out of range [0, 1)", func() { opt.SetLR(1, 0.1) }},
		{"lr_bad_group", "optim: Adam.LR: group -1 out of range", func() { opt.LR(-1) }},
	} {
		t.Run(tc.name, func(t *testing.T) { expectPanic(t, tc.want, tc.f) })
	}
}

// Moments aliases the state StateDict shows, and SetSteps sets every
// parameter's step, as the string keys of a state dict would.
func TestAdamMomentsSetSteps(t *testing.T) {
	p := autograd.NewVar(tensor.FromSlice([]float32{1, -2, 3, 4}, 2, 2), true)
	p.Grad = tensor.FromSlice([]float32{0.5, 1, -1, 2}, 2, 2)
	opt, err := optim.NewAdamW([]optim.Group{{Params: []*autograd.Var{p}, LR: 0.1}}, optim.AdamOptions{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8})
	if err != nil {
		t.Fatal(err)
	}
	opt.Step()
	m1, m2 := opt.Moments()
	sd := opt.StateDict()
	if !slices.Equal(m1[0].Data(), sd.Tensors["state.0.exp_avg"].Data()) || !slices.Equal(m2[0].Data(), sd.Tensors["state.0.exp_avg_sq"].Data()) ||
		!slices.Equal(m1[0].Shape(), []int{2, 2}) {
		t.Fatalf("Moments %v %v, state dict %v %v", m1[0].Data(), m2[0].Data(), sd.Tensors["state.0.exp_avg"].Data(), sd.Tensors["state.0.exp_avg_sq"].Data())
	}
	m1[0].Data()[0] = 42
	if got := opt.StateDict().Tensors["state.0.exp_avg"].Data()[0]; got != 42 {
		t.Errorf("a write through Moments is not in the state: %v", got)
	}
	opt.SetSteps(7)
	if got := opt.StateDict().Scalars["state.0.step"]; got != 7 {
		t.Errorf("step after SetSteps(7) = %v", got)
	}
}
