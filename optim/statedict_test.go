package optim_test

import (
	"slices"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// copyState deep-copies sd, as a save to disk and a load would.
func copyState(sd *optim.StateDict) *optim.StateDict {
	out := &optim.StateDict{Kind: sd.Kind, Tensors: map[string]*tensor.Tensor{}, Scalars: map[string]float64{}}
	for k, t := range sd.Tensors {
		out.Tensors[k] = tensor.FromSlice(slices.Clone(t.Data()), t.Shape()...)
	}
	for k, v := range sd.Scalars {
		out.Scalars[k] = v
	}
	return out
}

// twin builds an optimizer of kind over two groups of fresh parameters
// initialised from values, returning it and its parameters.
func twin(t *testing.T, kind string, values [][]float32) (optim.Optimizer, []*autograd.Var) {
	t.Helper()
	ps := make([]*autograd.Var, len(values))
	for i, v := range values {
		ps[i] = autograd.NewVar(tensor.FromSlice(slices.Clone(v), len(v)), true)
	}
	opt, err := builders[kind]([]optim.Group{{Params: ps[:2], LR: 0.01, WeightDecay: 0.1}, {Params: ps[2:], LR: 0.03}})
	if err != nil {
		t.Fatal(err)
	}
	return opt, ps
}

func stepWith(opt optim.Optimizer, ps []*autograd.Var, grads [][]float32) {
	for i, p := range ps {
		p.Grad = nil
		if grads[i] != nil {
			p.Grad = tensor.FromSlice(slices.Clone(grads[i]), len(grads[i]))
		}
	}
	opt.Step()
}

// Saving after some steps and loading into a fresh optimizer over copies of
// the parameters continues the run bit for bit, including per-parameter
// step counts (parameter 2 misses gradients) and a changed learning rate.
func TestStateDictResumesExactly(t *testing.T) {
	for kind := range builders {
		t.Run(kind, func(t *testing.T) {
			rng := newRNG(7)
			sizes := []int{5, 3, 4}
			values := make([][]float32, len(sizes))
			for i, n := range sizes {
				values[i] = randSlice(rng, n, 1)
			}
			grads := func(k int) [][]float32 {
				g := make([][]float32, len(sizes))
				for i, n := range sizes {
					if i != 2 || k%2 == 0 {
						g[i] = randSlice(rng, n, 1)
					}
				}
				return g
			}
			a, pa := twin(t, kind, values)
			for k := range 3 {
				stepWith(a, pa, grads(k))
			}
			a.SetLR(1, 0.007)
			current := make([][]float32, len(pa))
			for i, p := range pa {
				current[i] = p.Value.Data()
			}
			b, pb := twin(t, kind, current)
			if err := b.LoadStateDict(copyState(a.StateDict())); err != nil {
				t.Fatal(err)
			}
			if b.LR(1) != 0.007 {
				t.Fatalf("loaded lr = %v, want 0.007", b.LR(1))
			}
			for k := 3; k < 6; k++ {
				g := grads(k)
				stepWith(a, pa, g)
				stepWith(b, pb, g)
			}
			for i := range pa {
				if !sameBits(pa[i].Value.Data(), pb[i].Value.Data()) {
					t.Fatalf("param %d diverged after resume: %v vs %v", i, pa[i].Value, pb[i].Value)
				}
			}
		})
	}
}

func TestStateDictNames(t *testing.T) {
	opt, _ := twin(t, "adamw", [][]float32{{1}, {2, 3}, {4}})
	sd := opt.StateDict()
	if sd.Kind != "adamw" {
		t.Fatalf("kind %q", sd.Kind)
	}
	for _, k := range []string{"state.0.exp_avg", "state.1.exp_avg_sq", "state.2.max_exp_avg_sq"} {
		if sd.Tensors[k] == nil {
			t.Errorf("missing tensor %q", k)
		}
	}
	for k, want := range map[string]float64{"group.0.params": 2, "group.1.lr": 0.03, "group.0.weight_decay": 0.1,
		"state.2.step": 0, "beta1": 0.9, "amsgrad": 1} {
		if got, ok := sd.Scalars[k]; !ok || got != want {
			t.Errorf("scalar %q = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if got := sd.Tensors["state.1.exp_avg"].Shape(); !slices.Equal(got, []int{2}) {
		t.Errorf("state.1.exp_avg shape %v, want [2]", got)
	}
}

func TestLoadStateDictErrors(t *testing.T) {
	for _, tc := range []struct {
		name, kind, want string
		edit             func(sd *optim.StateDict)
	}{
		{"nil", "sgd", "nil state dict", nil},
		{"wrong_kind", "adam", `optim: Adam.LoadStateDict: state dict is of kind "sgd", want "adam"`,
			func(sd *optim.StateDict) { sd.Kind = "sgd" }},
		{"unknown_tensor", "sgd", `optim: SGD.LoadStateDict: unknown tensor key "state.9.momentum_buffer"`,
			func(sd *optim.StateDict) { sd.Tensors["state.9.momentum_buffer"] = tensor.New(1) }},
		{"missing_tensor", "adam", `missing tensor key "state.1.exp_avg_sq"`,
			func(sd *optim.StateDict) { delete(sd.Tensors, "state.1.exp_avg_sq") }},
		{"bad_shape", "adamw", `key "state.0.exp_avg": shape [2], want [1]`,
			func(sd *optim.StateDict) { sd.Tensors["state.0.exp_avg"] = tensor.New(2) }},
		{"nil_tensor", "adamw", `key "state.0.exp_avg": shape [], want [1]`,
			func(sd *optim.StateDict) { sd.Tensors["state.0.exp_avg"] = nil }},
		{"missing_scalar", "sgd", `missing scalar key "group.1.lr"`,
			func(sd *optim.StateDict) { delete(sd.Scalars, "group.1.lr") }},
		{"fractional_step", "adam", `key "state.2.step" = 1.5, want a whole number >= 0`,
			func(sd *optim.StateDict) { sd.Scalars["state.2.step"] = 1.5 }},
		{"negative_lr", "adam", `key "group.0.lr" = -1, want a finite value >= 0`,
			func(sd *optim.StateDict) { sd.Scalars["group.0.lr"] = -1 }},
		{"group_layout", "sgd", `key "group.0.params" = 3, but the group has 2 parameters`,
			func(sd *optim.StateDict) { sd.Scalars["group.0.params"] = 3 }},
		{"bad_beta", "adam", "beta2 = 1 is outside [0, 1)",
			func(sd *optim.StateDict) { sd.Scalars["beta2"] = 1 }},
		{"bad_flag", "sgd", `key "nesterov" = 0.5, want 0 or 1`,
			func(sd *optim.StateDict) { sd.Scalars["nesterov"] = 0.5 }},
		{"amsgrad_changed", "adamw", `key "amsgrad" = 0, but this optimizer was built with amsgrad true`,
			func(sd *optim.StateDict) { sd.Scalars["amsgrad"] = 0 }},
		{"momentum_dropped", "sgd", `key "momentum" = 0, but this optimizer was built with momentum 0.9`,
			func(sd *optim.StateDict) { sd.Scalars["momentum"] = 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt, ps := twin(t, tc.kind, [][]float32{{1}, {2, 3}, {4}})
			stepWith(opt, ps, [][]float32{{1}, {1, 1}, {1}})
			before := copyState(opt.StateDict())
			var sd *optim.StateDict
			if tc.edit != nil {
				sd = copyState(before)
				for _, tt := range sd.Tensors { // distinguishable from the live state
					tt.Data()[0] = 42
				}
				tc.edit(sd)
			}
			err := opt.LoadStateDict(sd)
			wantErr(t, err, optim.ErrInvalid, tc.want)
			after := opt.StateDict()
			for k, tt := range before.Tensors {
				if !sameBits(tt.Data(), after.Tensors[k].Data()) {
					t.Fatalf("failed load changed %q", k)
				}
			}
			for k, v := range before.Scalars {
				if after.Scalars[k] != v {
					t.Fatalf("failed load changed %q: %v -> %v", k, v, after.Scalars[k])
				}
			}
		})
	}
}
