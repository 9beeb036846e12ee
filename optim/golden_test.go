package optim_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// testdata/goldens.json comes from testdata/make_goldens.py (PyTorch 1.13,
// float64) and covers what the repository-wide golden files do not.

type goldenT struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

type goldens struct {
	Optimizers []struct {
		Name    string         `json:"name"`
		Kind    string         `json:"kind"`
		Options map[string]any `json:"options"`
		Groups  []struct {
			LR          float64 `json:"lr"`
			WeightDecay float64 `json:"weight_decay"`
			Params      []int   `json:"params"`
		} `json:"groups"`
		Params []goldenT    `json:"params"`
		Grads  [][]*goldenT `json:"grads"`
		After  [][]goldenT  `json:"params_after_each_step"`
	} `json:"optimizers"`
	Clips []struct {
		Name      string    `json:"name"`
		MaxNorm   float64   `json:"max_norm"`
		NormType  any       `json:"norm_type"`
		Grads     []goldenT `json:"grads"`
		TotalNorm float64   `json:"total_norm"`
		Clipped   []goldenT `json:"clipped"`
	} `json:"clips"`
	Schedules []struct {
		Name      string      `json:"name"`
		BaseLRs   []float64   `json:"base_lrs"`
		LRPerStep [][]float64 `json:"lr_per_step"`
	} `json:"schedules"`
}

func loadGoldens(t *testing.T) *goldens {
	t.Helper()
	b, err := os.ReadFile("testdata/goldens.json")
	if err != nil {
		t.Fatal(err)
	}
	var g goldens
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("testdata/goldens.json: %v", err)
	}
	return &g
}

func f32(d []float64) []float32 {
	out := make([]float32, len(d))
	for i, v := range d {
		out[i] = float32(v)
	}
	return out
}

// closeTo is the golden tolerance |got − want| ≤ 1e-5 + 1e-4·|want|.
func closeTo(got, want float64) bool { return math.Abs(got-want) <= 1e-5+1e-4*math.Abs(want) }

func checkClose(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !closeTo(float64(got[i]), want[i]) {
			t.Errorf("%s[%d] = %g, want %g", what, i, got[i], want[i])
			return
		}
	}
}

func optBool(m map[string]any, k string) bool   { v, _ := m[k].(bool); return v }
func optNum(m map[string]any, k string) float64 { v, _ := m[k].(float64); return v }

func TestGoldenOptimizers(t *testing.T) {
	for _, c := range loadGoldens(t).Optimizers {
		t.Run(c.Name, func(t *testing.T) {
			ps := make([]*autograd.Var, len(c.Params))
			for i, p := range c.Params {
				ps[i] = autograd.NewVar(tensor.FromSlice(f32(p.Data), p.Shape...), true)
			}
			var groups []optim.Group
			for _, g := range c.Groups {
				gr := optim.Group{LR: g.LR, WeightDecay: g.WeightDecay}
				for _, i := range g.Params {
					gr.Params = append(gr.Params, ps[i])
				}
				groups = append(groups, gr)
			}
			var opt optim.Optimizer
			var err error
			switch c.Kind {
			case "sgd":
				opt, err = optim.NewSGD(groups, optim.SGDOptions{Momentum: optNum(c.Options, "momentum"),
					Dampening: optNum(c.Options, "dampening"), Nesterov: optBool(c.Options, "nesterov"),
					Maximize: optBool(c.Options, "maximize")})
			case "adam", "adamw":
				o := optim.AdamOptions{Beta1: optNum(c.Options, "beta1"), Beta2: optNum(c.Options, "beta2"),
					Eps: optNum(c.Options, "eps"), AMSGrad: optBool(c.Options, "amsgrad"), Maximize: optBool(c.Options, "maximize")}
				if c.Kind == "adam" {
					opt, err = optim.NewAdam(groups, o)
				} else {
					opt, err = optim.NewAdamW(groups, o)
				}
			default:
				t.Fatalf("unknown kind %q", c.Kind)
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, gk := range c.Grads {
				for i, g := range gk {
					ps[i].Grad = nil
					if g != nil {
						ps[i].Grad = tensor.FromSlice(f32(g.Data), g.Shape...)
					}
				}
				opt.Step()
				for i, p := range ps {
					checkClose(t, fmt.Sprintf("step %d param %d", k+1, i), p.Value.Data(), c.After[k][i].Data)
				}
			}
		})
	}
}

func TestGoldenClip(t *testing.T) {
	for _, c := range loadGoldens(t).Clips {
		t.Run(c.Name, func(t *testing.T) {
			normType := math.Inf(1)
			if v, ok := c.NormType.(float64); ok {
				normType = v
			}
			ps := make([]*autograd.Var, len(c.Grads))
			for i, g := range c.Grads {
				ps[i] = autograd.NewVar(tensor.New(g.Shape...), true)
				ps[i].Grad = tensor.FromSlice(f32(g.Data), g.Shape...)
			}
			total, err := optim.ClipGradNorm(ps, c.MaxNorm, normType)
			if err != nil {
				t.Fatal(err)
			}
			if !closeTo(total, c.TotalNorm) {
				t.Errorf("total norm = %g, want %g", total, c.TotalNorm)
			}
			for i, p := range ps {
				checkClose(t, fmt.Sprintf("clipped[%d]", i), p.Grad.Data(), c.Clipped[i].Data)
			}
		})
	}
}

// goldenSchedules maps the cases of make_goldens.py to cohort schedules.
var goldenSchedules = map[string]optim.Schedule{
	"warmup_cosine": optim.Sequential{
		Schedules:  []optim.Schedule{optim.LinearLR{StartFactor: 0.01, EndFactor: 1, TotalIters: 5}, optim.CosineAnnealingLR{TMax: 20, EtaMin: 1e-4}},
		Milestones: []int{5},
	},
	"linear_step_step": optim.Sequential{
		Schedules: []optim.Schedule{optim.LinearLR{StartFactor: 0.5, EndFactor: 1, TotalIters: 3},
			optim.StepLR{StepSize: 4, Gamma: 0.5}, optim.StepLR{StepSize: 2, Gamma: 0.9}},
		Milestones: []int{4, 12},
	},
	"cosine_past_tmax": optim.CosineAnnealingLR{TMax: 7, EtaMin: 0.001},
	"linear_decay":     optim.LinearLR{StartFactor: 1, EndFactor: 0, TotalIters: 10},
}

func TestGoldenSchedules(t *testing.T) {
	cases := loadGoldens(t).Schedules
	if len(cases) != len(goldenSchedules) {
		t.Fatalf("%d golden schedules, %d mapped", len(cases), len(goldenSchedules))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			s, ok := goldenSchedules[c.Name]
			if !ok {
				t.Fatalf("no schedule for golden case %q", c.Name)
			}
			var groups []optim.Group
			for _, lr := range c.BaseLRs {
				groups = append(groups, optim.Group{Params: []*autograd.Var{autograd.NewVar(tensor.New(1), true)}, LR: lr})
			}
			opt, err := optim.NewSGD(groups, optim.SGDOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sch, err := optim.NewScheduler(opt, s)
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range c.LRPerStep {
				for g, w := range want {
					if got := opt.LR(g); !closeTo(got, w) {
						t.Errorf("step %d group %d: lr = %g, want %g", k, g, got, w)
					}
				}
				sch.Step()
			}
		})
	}
}
