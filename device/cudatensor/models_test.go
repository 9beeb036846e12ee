package cudatensor

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// dryKind is a device kind, for this package's tests only, served by this
// package's backend over a dry run: the ops run their host-side logic
// and record their launches, with no GPU. It lets a whole training step
// of each model be checked for a path with no kernel.
const dryKind = "cudadry"

var dryState = &state{dev: tensor.NewDevice(dryKind, 0), dry: &dryRun{next: 1 << 20}}

func init() { tensor.Register(dryKind, backend{dry: dryState}) }

// step trains m for one step on dev and returns the kernels launched.
func dryStep(t *testing.T, build func(rng *rand.Rand) (nn.Module, func() *autograd.Var), clip float64) []string {
	t.Helper()
	dev := tensor.NewDevice(dryKind, 0)
	m, loss := build(rand.New(rand.NewPCG(1, 2)))
	nn.To(m, dev)
	opt, err := optim.NewAdamW([]optim.Group{{Params: nn.Parameters(m), LR: 1e-3, WeightDecay: 0.01}}, optim.AdamDefaults())
	if err != nil {
		t.Fatal(err)
	}
	dryState.dry.mu.Lock()
	dryState.dry.launches, dryState.dry.gemms = nil, nil
	dryState.dry.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("a training step on the dry device: %v", r)
		}
	}()
	for range 2 {
		opt.ZeroGrad()
		l := loss()
		autograd.Backward(l)
		if _, err := optim.ClipGradNorm(nn.Parameters(m), clip, 2); err != nil {
			t.Fatal(err)
		}
		opt.Step()
		_ = l.Value.To(tensor.CPU).Item()
	}
	count := map[string]int{}
	for _, l := range dryState.dry.launches {
		count[l.op+":"+l.kernel]++
	}
	var out []string
	for k, n := range count {
		out = append(out, fmt.Sprintf("%s×%d", k, n))
	}
	sort.Strings(out)
	t.Logf("%d launches, %d GEMMs in two steps: %s", len(dryState.dry.launches), len(dryState.dry.gemms), strings.Join(out, " "))
	return out
}

// TestModelsRunDry trains the MLP, LeNet and a small GPT for two steps on
// the dry device: every op of their forward and backward passes, AdamW
// and clipping must have a CUDA path (a missing kernel panics).
func TestModelsRunDry(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	targets := func(n, v int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(rng.IntN(v))
		}
		return out
	}
	// classifier is a 10-class model on a zero batch of shape, trained with
	// the mean cross-entropy.
	classifier := func(model func(*rand.Rand) *nn.Sequential, shape ...int) func(*rand.Rand) (nn.Module, func() *autograd.Var) {
		return func(r *rand.Rand) (nn.Module, func() *autograd.Var) {
			m := model(r)
			x := tensor.New(shape...).To(tensor.NewDevice(dryKind, 0))
			y := targets(shape[0], 10)
			return m, func() *autograd.Var {
				return autograd.CrossEntropy(m.Forward(autograd.NewVar(x, false)), y, autograd.CrossEntropyOptions{})
			}
		}
	}
	t.Run("mlp", func(t *testing.T) { dryStep(t, classifier(models.MLP, 4, 784), 1) })
	t.Run("lenet", func(t *testing.T) { dryStep(t, classifier(models.LeNet, 2, 1, 28, 28), 1) })
	t.Run("gpt", func(t *testing.T) {
		dryStep(t, func(r *rand.Rand) (nn.Module, func() *autograd.Var) {
			g, err := models.NewGPT(r, models.GPTConfig{Vocab: 17, Ctx: 8, NLayer: 2, D: 16, NHead: 2})
			if err != nil {
				t.Fatal(err)
			}
			ids, next := targets(16, 17), targets(16, 17)
			return g, func() *autograd.Var { return g.Loss(g.Forward(ids, 2, 8), next) }
		}, 1)
	})
}
