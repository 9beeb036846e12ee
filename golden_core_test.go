package cohort_test

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// coreGoldenRunners covers tensor, autograd and nn ops.
func coreGoldenRunners() map[string]goldenRunner {
	unary := func(f func(x *autograd.Var) *autograd.Var) goldenRunner {
		return opGolden([]string{"x"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			return f(in["x"])
		})
	}
	binary := func(f func(a, b *autograd.Var) *autograd.Var) goldenRunner {
		return opGolden([]string{"a", "b"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			return f(in["a"], in["b"])
		})
	}
	reduce := func(all func(*autograd.Var) *autograd.Var, dim func(*autograd.Var, int, bool) *autograd.Var) goldenRunner {
		return opGolden([]string{"x"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			d := decode[*int](t, c.Attrs, "dim")
			if d == nil {
				return all(in["x"])
			}
			return dim(in["x"], *d, false)
		})
	}
	softmax := func(f func(*autograd.Var, int) *autograd.Var) goldenRunner {
		return opGolden([]string{"x"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			return f(in["x"], decode[int](t, c.Attrs, "dim"))
		})
	}
	pool := func(f func(x *autograd.Var, k, s, p int) *autograd.Var) goldenRunner {
		return opGolden([]string{"x"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			return f(in["x"], decode[int](t, c.Attrs, "kernel"), decode[int](t, c.Attrs, "stride"), 0)
		})
	}
	return map[string]goldenRunner{
		"relu":           unary(autograd.ReLU),
		"tanh":           unary(autograd.Tanh),
		"sigmoid":        unary(autograd.Sigmoid),
		"silu":           unary(autograd.SiLU),
		"gelu":           unary(autograd.GELU),
		"gelu_tanh":      unary(autograd.GELUTanh),
		"exp":            unary(autograd.Exp),
		"log_abs_plus1":  unary(func(x *autograd.Var) *autograd.Var { return autograd.Log(autograd.AddScalar(autograd.Abs(x), 1)) }),
		"sqrt_abs_plus1": unary(func(x *autograd.Var) *autograd.Var { return autograd.Sqrt(autograd.AddScalar(autograd.Abs(x), 1)) }),
		"add":            binary(autograd.Add),
		"sub":            binary(autograd.Sub),
		"mul":            binary(autograd.Mul),
		"div":            binary(autograd.Div),
		"sum":            reduce(autograd.Sum, autograd.SumDim),
		"mean":           reduce(autograd.Mean, autograd.MeanDim),
		"matmul":         binary(autograd.MatMul),
		"linear": opGolden([]string{"x", "weight", "bias?"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			return autograd.Linear(in["x"], in["weight"], in["bias"])
		}),
		"conv2d": opGolden([]string{"x", "weight", "bias"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			return autograd.Conv2d(in["x"], in["weight"], in["bias"], decode[int](t, c.Attrs, "stride"), decode[int](t, c.Attrs, "padding"))
		}),
		"max_pool2d":  pool(autograd.MaxPool2d),
		"avg_pool2d":  pool(autograd.AvgPool2d),
		"softmax":     softmax(autograd.Softmax),
		"log_softmax": softmax(autograd.LogSoftmax),
		"cross_entropy": opGolden([]string{"logits"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			o := autograd.CrossEntropyOptions{}
			switch r := decode[string](t, c.Attrs, "reduction"); r {
			case "mean":
			case "sum":
				o.Reduction = autograd.ReduceSum
			default:
				t.Fatalf("golden: unknown reduction %q", r)
			}
			if has(c.Attrs, "ignore_index") {
				o.Ignore, o.IgnoreIndex = true, decode[int64](t, c.Attrs, "ignore_index")
			}
			if has(c.Attrs, "label_smoothing") {
				o.LabelSmoothing = decode[float64](t, c.Attrs, "label_smoothing")
			}
			return autograd.CrossEntropy(in["logits"], goldenInts(t, c, "target"), o)
		}),
		"mse_loss": opGolden([]string{"x", "y"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			if r := decode[string](t, c.Attrs, "reduction"); r != "mean" {
				t.Fatalf("golden: unknown reduction %q", r)
			}
			return autograd.MSELoss(in["x"], in["y"], autograd.ReduceMean)
		}),
		"layer_norm": opGolden([]string{"x", "weight", "bias"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			return autograd.LayerNorm(in["x"], in["weight"], in["bias"], decode[float64](t, c.Attrs, "eps"))
		}),
		"batch_norm2d": runBatchNormGolden,
		"embedding": opGolden([]string{"weight"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			idx := decode[goldenTensor](t, c.Inputs, "indices")
			return autograd.Embedding(in["weight"], goldenInts(t, c, "indices"), idx.Shape...)
		}),
		"causal_attention": opGolden([]string{"q", "k", "v"}, func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var {
			return autograd.Attention(in["q"], in["k"], in["v"], true)
		}),
		"mlp_sgd_step":              runMLPStepGolden,
		"transformer_block":         runBlockGolden,
		"gpt_mini_forward_backward": runGPTGolden,
		"gpt_mini_adamw_step":       runGPTAdamWGolden,
		"gpt_mini_adamw_steps":      runGPTAdamWGolden,
	}
}

// goldenVar returns a case input as a leaf that requires grad.
func goldenVar(t *testing.T, c *goldenCase, name string) *autograd.Var {
	t.Helper()
	g := decode[goldenTensor](t, c.Inputs, name)
	return autograd.NewVar(tensor.FromSlice(f32s(g.Data), g.Shape...), true)
}

// goldenInts returns an integer input (targets, indices).
func goldenInts(t *testing.T, c *goldenCase, name string) []int64 {
	t.Helper()
	g := decode[goldenTensor](t, c.Inputs, name)
	out := make([]int64, len(g.Data))
	for i, v := range g.Data {
		out[i] = int64(v)
	}
	return out
}

// checkTensor compares a tensor with a golden one, shape included.
func checkTensor(t *testing.T, what string, got *tensor.Tensor, want goldenTensor) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: missing", what)
		return
	}
	if !slices.Equal(got.Shape(), want.Shape) {
		t.Errorf("%s: shape %v, want %v", what, got.Shape(), want.Shape)
		return
	}
	checkClose(t, what, got.Contiguous().Data(), want)
}

// opGolden runs a single-output op case: the named float inputs become
// leaves ("name?" marks an optional one), the output is checked against
// outputs.out, then Backward from inputs.dout and every recorded gradient is
// checked. An input left without a recorded gradient is an error.
func opGolden(names []string, f func(t *testing.T, c *goldenCase, in map[string]*autograd.Var) *autograd.Var) goldenRunner {
	return func(t *testing.T, c *goldenCase) {
		in := map[string]*autograd.Var{}
		for _, n := range names {
			optional := n[len(n)-1] == '?'
			if optional {
				n = n[:len(n)-1]
				if !has(c.Inputs, n) {
					continue
				}
			}
			in[n] = goldenVar(t, c, n)
		}
		out := f(t, c, in)
		checkTensor(t, "out", out.Value, decode[goldenTensor](t, c.Outputs, "out"))
		dout := decode[goldenTensor](t, c.Inputs, "dout")
		autograd.BackwardGrad(out, tensor.FromSlice(f32s(dout.Data), dout.Shape...))
		checkGrads(t, c, in)
	}
}

// checkGrads checks every gradient the case records, and that every input
// given got one.
func checkGrads(t *testing.T, c *goldenCase, in map[string]*autograd.Var) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(c.Grads)) {
		v, ok := in[name]
		if !ok {
			t.Errorf("golden: gradient recorded for %q, which the runner did not use", name)
			continue
		}
		checkTensor(t, "grad "+name, v.Grad, decode[goldenTensor](t, c.Grads, name))
	}
	for name := range in {
		if !has(c.Grads, name) {
			t.Errorf("golden: no recorded gradient for input %q", name)
		}
	}
}

func runBatchNormGolden(t *testing.T, c *goldenCase) {
	in := map[string]*autograd.Var{"x": goldenVar(t, c, "x"), "weight": goldenVar(t, c, "weight"), "bias": goldenVar(t, c, "bias")}
	rm, rv := goldenVar(t, c, "running_mean_in").Value, goldenVar(t, c, "running_var_in").Value
	o := autograd.BatchNormOptions{
		Training: decode[bool](t, c.Attrs, "training"),
		Momentum: decode[float64](t, c.Attrs, "momentum"),
		Eps:      decode[float64](t, c.Attrs, "eps"),
	}
	out := autograd.BatchNorm(in["x"], in["weight"], in["bias"], rm, rv, o)
	checkTensor(t, "out", out.Value, decode[goldenTensor](t, c.Outputs, "out"))
	checkTensor(t, "running_mean", rm, decode[goldenTensor](t, c.Outputs, "running_mean"))
	checkTensor(t, "running_var", rv, decode[goldenTensor](t, c.Outputs, "running_var"))
	dout := decode[goldenTensor](t, c.Inputs, "dout")
	autograd.BackwardGrad(out, tensor.FromSlice(f32s(dout.Data), dout.Shape...))
	checkGrads(t, c, in)
}

// runMLPStepGolden trains linear(6,5)-relu-linear(5,3) for one SGD step
// with momentum on cross-entropy.
func runMLPStepGolden(t *testing.T, c *goldenCase) {
	rng := rand.New(rand.NewPCG(1, 1))
	m := nn.NewSequential(nn.NewLinear(rng, 6, 5, true), nn.ReLU{}, nn.NewLinear(rng, 5, 3, true))
	sd := map[string]*tensor.Tensor{}
	for gname, pname := range map[string]string{"w1": "0.weight", "b1": "0.bias", "w2": "2.weight", "b2": "2.bias"} {
		sd[pname] = goldenVar(t, c, gname).Value
	}
	if err := nn.LoadStateDict(m, sd); err != nil {
		t.Fatal(err)
	}
	opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: decode[float64](t, c.Attrs, "lr")}},
		optim.SGDOptions{Momentum: decode[float64](t, c.Attrs, "momentum")})
	if err != nil {
		t.Fatal(err)
	}
	x := goldenVar(t, c, "x")
	x.SetRequiresGrad(false)
	opt.ZeroGrad()
	loss := nn.CrossEntropy(m.Forward(x), goldenInts(t, c, "target"))
	autograd.Backward(loss)
	opt.Step()
	checkScalar(t, "loss", float64(loss.Value.Item()), decode[float64](t, c.Outputs, "loss"))
	after := nn.StateDict(m)
	for gname, pname := range map[string]string{"w1": "0.weight", "b1": "0.bias", "w2": "2.weight", "b2": "2.bias"} {
		checkTensor(t, gname, after[pname], decode[goldenTensor](t, c.Outputs, gname))
	}
}

// runBlockGolden loads the block weights into nn.Block and checks the
// output and the gradients of x and every weight.
func runBlockGolden(t *testing.T, c *goldenCase) {
	d, h := decode[int](t, c.Attrs, "d_model"), decode[int](t, c.Attrs, "n_head")
	if !decode[bool](t, c.Attrs, "causal") || decode[float64](t, c.Attrs, "ln_eps") != 1e-5 || decode[int](t, c.Attrs, "mlp_hidden") != 4*d {
		t.Fatalf("golden: block attributes %v differ from nn.Block's conventions", c.Attrs)
	}
	b := nn.NewBlock(rand.New(rand.NewPCG(1, 1)), d, h)
	in := loadGoldenParams(t, c, b)
	in["x"] = goldenVar(t, c, "x")
	out := b.Forward(in["x"])
	checkTensor(t, "out", out.Value, decode[goldenTensor](t, c.Outputs, "out"))
	dout := decode[goldenTensor](t, c.Inputs, "dout")
	autograd.BackwardGrad(out, tensor.FromSlice(f32s(dout.Data), dout.Shape...))
	checkGrads(t, c, in)
}

// loadGoldenParams copies the case's inputs named like m's parameters into
// m and returns the parameters by name.
func loadGoldenParams(t *testing.T, c *goldenCase, m nn.Module) map[string]*autograd.Var {
	t.Helper()
	sd := map[string]*tensor.Tensor{}
	params := map[string]*autograd.Var{}
	for _, p := range m.NamedParameters() {
		sd[p.Name] = goldenVar(t, c, p.Name).Value
		params[p.Name] = p.Param
	}
	if err := nn.LoadStateDict(m, sd); err != nil {
		t.Fatal(err)
	}
	return params
}

func goldenGPT(t *testing.T, c *goldenCase) (*models.GPT, map[string]*autograd.Var) {
	t.Helper()
	cfg := models.GPTConfig{
		Vocab: decode[int](t, c.Attrs, "vocab"), Ctx: decode[int](t, c.Attrs, "ctx"),
		NLayer: decode[int](t, c.Attrs, "n_layer"), D: decode[int](t, c.Attrs, "d_model"), NHead: decode[int](t, c.Attrs, "n_head"),
	}
	g, err := models.NewGPT(rand.New(rand.NewPCG(1, 1)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, p := range g.NamedParameters() {
		order = append(order, p.Name)
	}
	if want := decode[[]string](t, c.Attrs, "param_names"); !equalStrings(order, want) {
		t.Fatalf("golden: parameter order %q, want %q", order, want)
	}
	return g, loadGoldenParams(t, c, g)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func runGPTGolden(t *testing.T, c *goldenCase) {
	g, params := goldenGPT(t, c)
	B, T := decode[int](t, c.Attrs, "batch"), decode[int](t, c.Attrs, "seq")
	logits := g.Forward(goldenInts(t, c, "idx"), B, T)
	loss := g.Loss(logits, goldenInts(t, c, "targets"))
	checkTensor(t, "logits", logits.Value, decode[goldenTensor](t, c.Outputs, "logits"))
	checkScalar(t, "loss", float64(loss.Value.Item()), decode[float64](t, c.Outputs, "loss"))
	autograd.Backward(loss)
	checkGrads(t, c, params)
}

// runGPTAdamWGolden replays forward, backward, clip_grad_norm and AdamW
// for one or more steps on the same batch.
func runGPTAdamWGolden(t *testing.T, c *goldenCase) {
	g, _ := goldenGPT(t, c)
	B, T := decode[int](t, c.Attrs, "batch"), decode[int](t, c.Attrs, "seq")
	idx, tgt := goldenInts(t, c, "idx"), goldenInts(t, c, "targets")
	params := nn.Parameters(g)
	opt, err := optim.NewAdamW([]optim.Group{{Params: params, LR: decode[float64](t, c.Attrs, "lr"), WeightDecay: decode[float64](t, c.Attrs, "weight_decay")}},
		optim.AdamOptions{Beta1: decode[float64](t, c.Attrs, "beta1"), Beta2: decode[float64](t, c.Attrs, "beta2"), Eps: decode[float64](t, c.Attrs, "eps")})
	if err != nil {
		t.Fatal(err)
	}
	maxNorm := decode[float64](t, c.Attrs, "max_norm")
	steps := decode[int](t, c.Attrs, "steps")
	var losses, norms []float64
	var after []map[string]*tensor.Tensor
	for s := 0; s < steps; s++ {
		opt.ZeroGrad()
		loss := g.Loss(g.Forward(idx, B, T), tgt)
		autograd.Backward(loss)
		norm, err := optim.ClipGradNorm(params, maxNorm, 2)
		if err != nil {
			t.Fatal(err)
		}
		opt.Step()
		losses, norms = append(losses, float64(loss.Value.Item())), append(norms, norm)
		snap := map[string]*tensor.Tensor{}
		for name, v := range nn.StateDict(g) {
			snap[name] = v.Clone()
		}
		after = append(after, snap)
	}
	if c.Op == "gpt_mini_adamw_step" {
		checkScalar(t, "loss", losses[0], decode[float64](t, c.Outputs, "loss"))
		checkScalar(t, "total_norm", norms[0], decode[float64](t, c.Outputs, "total_norm"))
		for name, v := range after[0] {
			checkTensor(t, name, v, decode[goldenTensor](t, c.Outputs, name))
		}
		return
	}
	wantLoss, wantNorm := decode[[]float64](t, c.Outputs, "losses"), decode[[]float64](t, c.Outputs, "total_norms")
	wantParams := decode[[]map[string]goldenTensor](t, c.Outputs, "params_after_each_step")
	if len(wantLoss) != steps || len(wantNorm) != steps || len(wantParams) != steps {
		t.Fatalf("golden: %d steps but %d losses, %d norms, %d snapshots", steps, len(wantLoss), len(wantNorm), len(wantParams))
	}
	for s := 0; s < steps; s++ {
		checkScalar(t, "loss", losses[s], wantLoss[s])
		checkScalar(t, "total_norm", norms[s], wantNorm[s])
		for _, name := range slices.Sorted(maps.Keys(wantParams[s])) {
			checkTensor(t, name, after[s][name], wantParams[s][name])
		}
	}
}
