package optim_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// newRNG returns the generator of the given seed (both PCG words).
func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// newParam returns a parameter of the given shape, values from randSlice.
func newParam(rng *rand.Rand, shape ...int) *autograd.Var {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return autograd.NewVar(tensor.FromSlice(randSlice(rng, n, 1), shape...), true)
}

func randSlice(rng *rand.Rand, n int, scale float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64() * scale)
	}
	return s
}

var sgdHypers = map[string]optim.SGDHyper{
	"plain":              {LR: 0.1},
	"wd":                 {LR: 0.1, WeightDecay: 0.01},
	"momentum":           {LR: 0.05, Momentum: 0.9},
	"momentum_dampening": {LR: 0.05, Momentum: 0.9, Dampening: 0.5, WeightDecay: 0.001},
	"nesterov_maximize":  {LR: 0.05, Momentum: 0.8, Nesterov: true, Maximize: true},
}

var adamHypers = map[string]optim.AdamHyper{
	"adam":          {LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
	"adam_l2":       {LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1},
	"adamw":         {LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Decoupled: true},
	"amsgrad":       {LR: 1e-2, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, AMSGrad: true},
	"adamw_ams_max": {LR: 1e-3, Beta1: 0, Beta2: 0.9, Eps: 1e-8, WeightDecay: 0.5, Decoupled: true, AMSGrad: true, Maximize: true},
}

func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// The updates are elementwise, so a sharded optimizer that runs them on
// pieces of a flat buffer must get exactly the bits of an unsharded one.
func TestUpdateShardedEqualsWhole(t *testing.T) {
	const steps = 5
	for _, n := range []int{1, 2, 7, 1000, 1<<12 + 3} {
		for _, cut := range []int{0, 1, n / 2, n - 1, n} {
			for name, h := range sgdHypers {
				t.Run(fmt.Sprintf("sgd_%s/n=%d/cut=%d", name, n, cut), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), uint64(cut)))
					whole := randSlice(rng, n, 1)
					split := slices.Clone(whole)
					bufW, bufS := make([]float32, n), make([]float32, n)
					for step := int64(1); step <= steps; step++ {
						g := randSlice(rng, n, 1)
						optim.SGDUpdate(whole, g, bufW, h, step)
						optim.SGDUpdate(split[:cut], g[:cut], bufS[:cut], h, step)
						optim.SGDUpdate(split[cut:], g[cut:], bufS[cut:], h, step)
					}
					if !sameBits(whole, split) || !sameBits(bufW, bufS) {
						t.Fatal("sharded update differs from the whole")
					}
				})
			}
			for name, h := range adamHypers {
				t.Run(fmt.Sprintf("%s/n=%d/cut=%d", name, n, cut), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), uint64(cut)))
					whole := randSlice(rng, n, 1)
					split := slices.Clone(whole)
					sw, ss := optim.NewAdamState(n, h.AMSGrad), optim.NewAdamState(n, h.AMSGrad)
					for step := int64(1); step <= steps; step++ {
						g := randSlice(rng, n, 1)
						optim.AdamUpdate(whole, g, sw, h, step)
						optim.AdamUpdate(split[:cut], g[:cut], ss.Slice(0, cut), h, step)
						optim.AdamUpdate(split[cut:], g[cut:], ss.Slice(cut, n), h, step)
					}
					if !sameBits(whole, split) || !sameBits(sw.ExpAvg, ss.ExpAvg) || !sameBits(sw.ExpAvgSq, ss.ExpAvgSq) ||
						!sameBits(sw.MaxExpAvgSq, ss.MaxExpAvgSq) {
						t.Fatal("sharded update differs from the whole")
					}
				})
			}
		}
	}
}

// refSGD and refAdam restate PyTorch 1.13's loops in float64, one tensor
// operation at a time.
func refSGD(p, g, buf []float64, h optim.SGDHyper, step int64) {
	for i := range p {
		d := g[i]
		if h.Maximize {
			d = -d
		}
		d += h.WeightDecay * p[i]
		if h.Momentum != 0 {
			if step == 1 {
				buf[i] = d
			} else {
				buf[i] = h.Momentum*buf[i] + (1-h.Dampening)*d
			}
			if h.Nesterov {
				d += h.Momentum * buf[i]
			} else {
				d = buf[i]
			}
		}
		p[i] -= h.LR * d
	}
}

func refAdam(p, g, m, v, vmax []float64, h optim.AdamHyper, step int64) {
	bc1 := 1 - math.Pow(h.Beta1, float64(step))
	bc2 := 1 - math.Pow(h.Beta2, float64(step))
	for i := range p {
		d := g[i]
		if h.Maximize {
			d = -d
		}
		if h.Decoupled {
			p[i] *= 1 - h.LR*h.WeightDecay
		} else {
			d += h.WeightDecay * p[i]
		}
		m[i] = h.Beta1*m[i] + (1-h.Beta1)*d
		v[i] = h.Beta2*v[i] + (1-h.Beta2)*d*d
		vv := v[i]
		if h.AMSGrad {
			vmax[i] = math.Max(vmax[i], v[i])
			vv = vmax[i]
		}
		p[i] -= h.LR / bc1 * m[i] / (math.Sqrt(vv)/math.Sqrt(bc2) + h.Eps)
	}
}

func widen(s []float32) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = float64(v)
	}
	return out
}

// The float32 kernels track a float64 restatement of the formulas over
// many steps with random hyperparameters.
func TestUpdateMatchesFloat64Reference(t *testing.T) {
	const n, steps = 257, 20
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 20 {
		sh := optim.SGDHyper{LR: rng.Float64() * 0.1, WeightDecay: rng.Float64() * 0.01, Maximize: rng.IntN(2) == 0}
		if rng.IntN(3) > 0 {
			sh.Momentum = rng.Float64()
			if sh.Nesterov = rng.IntN(2) == 0; !sh.Nesterov {
				sh.Dampening = rng.Float64()
			}
		}
		ah := optim.AdamHyper{LR: rng.Float64() * 0.01, WeightDecay: rng.Float64() * 0.1, Beta1: rng.Float64() * 0.99,
			Beta2: 0.9 + rng.Float64()*0.0999, Eps: 1e-8, Decoupled: rng.IntN(2) == 0, AMSGrad: rng.IntN(2) == 0,
			Maximize: rng.IntN(2) == 0}
		t.Run(fmt.Sprintf("trial=%d", trial), func(t *testing.T) {
			p0 := randSlice(rng, n, 1)
			sp, ap := slices.Clone(p0), slices.Clone(p0)
			sbuf, st := make([]float32, n), optim.NewAdamState(n, ah.AMSGrad)
			rp, rap := widen(p0), widen(p0)
			rbuf, rm, rv, rvmax := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
			for step := int64(1); step <= steps; step++ {
				g := randSlice(rng, n, 1)
				optim.SGDUpdate(sp, g, sbuf, sh, step)
				optim.AdamUpdate(ap, g, st, ah, step)
				refSGD(rp, widen(g), rbuf, sh, step)
				refAdam(rap, widen(g), rm, rv, rvmax, ah, step)
			}
			checkClose(t, fmt.Sprintf("sgd %+v", sh), sp, rp)
			checkClose(t, fmt.Sprintf("adam %+v", ah), ap, rap)
		})
	}
}

func TestUpdatePanicsOnBadLengths(t *testing.T) {
	s := make([]float32, 4)
	short := make([]float32, 3)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"sgd_grad", func() { optim.SGDUpdate(s, short, nil, optim.SGDHyper{LR: 1}, 1) }},
		{"sgd_buf", func() { optim.SGDUpdate(s, s, short, optim.SGDHyper{LR: 1, Momentum: 0.9}, 1) }},
		{"sgd_step0", func() { optim.SGDUpdate(s, s, nil, optim.SGDHyper{LR: 1}, 0) }},
		{"adam_grad", func() { optim.AdamUpdate(s, short, optim.NewAdamState(4, false), adamHypers["adam"], 1) }},
		{"adam_state", func() { optim.AdamUpdate(s, s, optim.NewAdamState(3, false), adamHypers["adam"], 1) }},
		{"adam_amsgrad_missing", func() { optim.AdamUpdate(s, s, optim.NewAdamState(4, false), adamHypers["amsgrad"], 1) }},
		{"adam_step0", func() { optim.AdamUpdate(s, s, optim.NewAdamState(4, false), adamHypers["adam"], 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) { expectPanic(t, "optim: ", tc.f) })
	}
}

// expectPanic runs f and requires a panic whose message starts with prefix.
func expectPanic(t *testing.T, prefix string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		msg, _ := r.(string)
		if r == nil {
			t.Fatal("no panic")
		}
		if len(msg) < len(prefix) || msg[:len(prefix)] != prefix {
			t.Fatalf("panic %v, want a message starting %q", r, prefix)
		}
		t.Log(msg)
	}()
	f()
}
