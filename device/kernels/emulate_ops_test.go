package kernels_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/device/kernels"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/tensortest"
)

// Each test runs kernels on the emulator and compares them with their CPU
// twins on random inputs: within 1e-5 (or to the bit, where the package
// doc says so) in fp32, and within the doc's bf16 bounds for bf16 inputs
// rounded from the same fp32 values.

const u = 1.0 / 256 // bf16's unit roundoff, 2⁻⁸

func newRNG(t *testing.T) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(len(t.Name())), 38))
}

func TestEmuElementwise(t *testing.T) {
	rng := newRNG(t)
	const n = 1000
	a, b := tensortest.Randn(rng, n), tensortest.Randn(rng, n)
	p := kernels.Problem{N: n}
	want := make([]float32, n)
	for i := range want {
		want[i] = a[i] + b[i]
	}
	got := make([]float32, n)
	launch(t, "add_f32", p, got, a, b, n)
	checkBits(t, "add_f32", got, want)

	y := append([]float32(nil), a...)
	launch(t, "axpy_f32", p, y, float32(0.3), b, n)
	ty := tensor.FromSlice(append([]float32(nil), a...), n)
	tensor.AddScaled(ty, 0.3, tensor.FromSlice(b, n))
	checkBits(t, "axpy_f32", y, ty.Data())

	r := make([]float32, n)
	launch(t, "relu_fwd_f32", p, r, a, n)
	checkBits(t, "relu_fwd_f32", r, tensor.ReLU(tensor.FromSlice(a, n)).Data())
	dx := make([]float32, n)
	launch(t, "relu_bwd_f32", p, dx, b, r, n)
	checkBits(t, "relu_bwd_f32", dx, tensor.ReLUBackward(tensor.FromSlice(b, n), tensor.FromSlice(r, n)).Data())

	// bf16: inputs rounded from fp32, one rounded fp32 product each.
	ab, bb := bf16s(a), bf16s(b)
	mb := make([]bf16, n)
	launch(t, "mul_bf16", p, mb, ab, bb, n)
	for i := range mb {
		if w := toBF16(ab[i].f32() * bb[i].f32()); mb[i] != w {
			t.Fatalf("mul_bf16[%d] = %v, want %v", i, mb[i].f32(), w.f32())
		}
	}
	exact := make([]float32, n)
	for i := range exact {
		exact[i] = a[i] * b[i]
	}
	checkRel(t, "mul_bf16 vs fp32", widen(mb), exact, 2*u)

	f := make([]bf16, 5)
	launch(t, "fill_bf16", kernels.Problem{N: 5}, f, float32(1.0/3), 5)
	for i := range f {
		if f[i] != toBF16(1.0/3) {
			t.Fatalf("fill_bf16[%d] = %v", i, f[i].f32())
		}
	}
}

func TestEmuGELU(t *testing.T) {
	rng := newRNG(t)
	const n = 777
	x, dy := tensortest.Randn(rng, n), tensortest.Randn(rng, n)
	for i := range x {
		x[i] *= 3
	}
	p := kernels.Problem{N: n}
	tx, tdy := tensor.FromSlice(x, n), tensor.FromSlice(dy, n)
	wantY, wantDx := tensor.GELUTanh(tx).Data(), tensor.GELUTanhBackward(tdy, tx).Data()
	y, dx := make([]float32, n), make([]float32, n)
	launch(t, "gelu_fwd_f32", p, y, x, n)
	launch(t, "gelu_bwd_f32", p, dx, dy, x, n)
	checkRel(t, "gelu_fwd_f32", y, wantY, 1e-6)
	checkRel(t, "gelu_bwd_f32", dx, wantDx, 1e-6)
	yb, dxb := make([]bf16, n), make([]bf16, n)
	launch(t, "gelu_fwd_bf16", p, yb, bf16s(x), n)
	launch(t, "gelu_bwd_bf16", p, dxb, bf16s(dy), bf16s(x), n)
	checkRel(t, "gelu_fwd_bf16", widen(yb), wantY, 2*u)
	checkRel(t, "gelu_bwd_bf16", widen(dxb), wantDx, 2*u)
}

func TestEmuBias(t *testing.T) {
	rng := newRNG(t)
	const rows, cols = 19, 45
	x, bias := tensortest.Randn(rng, rows*cols), tensortest.Randn(rng, cols)
	out := make([]float32, rows*cols)
	launch(t, "bias_add_f32", kernels.Problem{Rows: rows, Cols: cols}, out, x, bias, rows, cols)
	for i := range out {
		if out[i] != x[i]+bias[i%cols] {
			t.Fatalf("bias_add_f32[%d] = %v, want %v", i, out[i], x[i]+bias[i%cols])
		}
	}
	db := make([]float32, cols)
	for i := range db {
		db[i] = 1
	}
	want := tensor.SumTo(tensor.FromSlice(x, rows, cols), cols).Data()
	for i := range want {
		want[i]++
	}
	launch(t, "bias_grad_f32", kernels.Problem{Cols: cols}, db, x, rows, cols, 1)
	checkRel(t, "bias_grad_f32 (accumulate)", db, want, 1e-6)
	dbb := make([]float32, cols)
	launch(t, "bias_grad_bf16", kernels.Problem{Cols: cols}, dbb, bf16s(x), rows, cols, 0)
	for i := range want {
		want[i]--
	}
	checkRel(t, "bias_grad_bf16", dbb, want, 2*u)
}

func TestEmuLayerNorm(t *testing.T) {
	rng := newRNG(t)
	const rows, D = 37, 100
	x, w, b, dy := tensortest.Randn(rng, rows*D), tensortest.Randn(rng, D), tensortest.Randn(rng, D), tensortest.Randn(rng, rows*D)
	tx := tensor.FromSlice(x, rows, D)
	tw, tb := tensor.FromSlice(w, D), tensor.FromSlice(b, D)
	wantY, wantMean, wantRstd := tensor.LayerNorm(tx, tw, tb, 1e-5)
	wantDx, wantDw, wantDb := tensor.LayerNormBackward(tensor.FromSlice(dy, rows, D), tx, tw, wantMean, wantRstd)

	p := kernels.Problem{Rows: rows, Cols: D}
	y, mean, rstd := make([]float32, rows*D), make([]float32, rows), make([]float32, rows)
	launch(t, "layernorm_fwd", p, y, mean, rstd, x, w, b, rows, D, float32(1e-5))
	checkRel(t, "layernorm_fwd y", y, wantY.Data(), 1e-5)
	checkRel(t, "layernorm_fwd mean", mean, wantMean, 1e-5)
	checkRel(t, "layernorm_fwd rstd", rstd, wantRstd, 1e-5)

	parts := kernels.LayerNormBwdParts(rows)
	dx := make([]float32, rows*D)
	dwp, dbp := make([]float32, parts*D), make([]float32, parts*D)
	launch(t, "layernorm_bwd", p, dx, dwp, dbp, dy, x, w, mean, rstd, rows, D, 0)
	dw, db := make([]float32, D), make([]float32, D)
	launch(t, "layernorm_bwd_reduce", kernels.Problem{Cols: D, Parts: parts}, dw, db, dwp, dbp, parts, D)
	checkRel(t, "layernorm_bwd dx", dx, wantDx.Data(), 1e-5)
	checkRel(t, "layernorm_bwd dw", dw, wantDw.Data(), 1e-5)
	checkRel(t, "layernorm_bwd db", db, wantDb.Data(), 1e-5)

	// accumulate adds dx into what the buffer held.
	acc := append([]float32(nil), dy...)
	launch(t, "layernorm_bwd", p, acc, dwp, dbp, dy, x, w, mean, rstd, rows, D, 1)
	want := make([]float32, rows*D)
	for i := range want {
		want[i] = dy[i] + wantDx.Data()[i]
	}
	checkRel(t, "layernorm_bwd dx (accumulate)", acc, want, 1e-5)
}

func TestEmuSoftmax(t *testing.T) {
	rng := newRNG(t)
	const rows, cols = 7, 300
	x, dy := tensortest.Randn(rng, rows*cols), tensortest.Randn(rng, rows*cols)
	wantY := tensor.Softmax(tensor.FromSlice(x, rows, cols), -1)
	wantDx := tensor.SoftmaxBackward(wantY, tensor.FromSlice(dy, rows, cols), -1)
	p := kernels.Problem{Rows: rows, Cols: cols}
	y, dx := make([]float32, rows*cols), make([]float32, rows*cols)
	launch(t, "softmax_fwd", p, y, x, rows, cols)
	launch(t, "softmax_bwd", p, dx, y, dy, rows, cols)
	checkRel(t, "softmax_fwd", y, wantY.Data(), 1e-5)
	checkRel(t, "softmax_bwd", dx, wantDx.Data(), 1e-5)
}

func TestEmuAttention(t *testing.T) {
	for _, tc := range []struct {
		name           string
		B, T, H, hd    int
		causal, isBF16 bool
	}{
		{"causal/hd=32", 2, 37, 2, 32, true, false},
		{"causal/hd=40", 1, 45, 2, 40, true, false},
		{"full/hd=16", 1, 33, 3, 16, false, false},
		{"causal/hd=128", 1, 20, 1, 128, true, false},
		{"causal/hd=32/bf16", 2, 37, 2, 32, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := newRNG(t)
			B, T, H, hd := tc.B, tc.T, tc.H, tc.hd
			d := H * hd
			qkv, dy := tensortest.Randn(rng, B*T*3*d), tensortest.Randn(rng, B*T*d)
			tq := tensor.FromSlice(qkv, B, T, 3*d)
			wantY, probs := tensor.AttentionQKV(tq, H, tc.causal)
			wantD := tensor.AttentionQKVBackward(tensor.FromSlice(dy, B, T, d), tq, probs, H, tc.causal)
			p := kernels.Problem{B: B, T: T, NHead: H, HeadDim: hd}
			scale := float32(1 / math.Sqrt(float64(hd)))
			causal := 0
			if tc.causal {
				causal = 1
			}
			lse, delta := make([]float32, B*H*T), make([]float32, B*H*T)
			if !tc.isBF16 {
				y, dqkv := make([]float32, B*T*d), make([]float32, B*T*3*d)
				launch(t, "attention_fwd_f32", p, y, lse, qkv, B, T, H, hd, scale, causal)
				launch(t, "attention_bwd_dq_f32", p, dqkv, delta, dy, y, qkv, lse, B, T, H, hd, scale, causal)
				launch(t, "attention_bwd_dkv_f32", p, dqkv, delta, dy, qkv, lse, B, T, H, hd, scale, causal)
				checkRel(t, "y", y, wantY.Data(), 1e-5)
				checkRel(t, "dqkv", dqkv, wantD.Data(), 1e-5)
				return
			}
			y, dqkv := make([]bf16, B*T*d), make([]bf16, B*T*3*d)
			qb, dyb := bf16s(qkv), bf16s(dy)
			launch(t, "attention_fwd_bf16", p, y, lse, qb, B, T, H, hd, scale, causal)
			launch(t, "attention_bwd_dq_bf16", p, dqkv, delta, dyb, y, qb, lse, B, T, H, hd, scale, causal)
			launch(t, "attention_bwd_dkv_bf16", p, dqkv, delta, dyb, qb, lse, B, T, H, hd, scale, causal)
			checkRel(t, "y bf16", widen(y), wantY.Data(), 4*u)
			checkRel(t, "dqkv bf16", widen(dqkv), wantD.Data(), 4*u)
		})
	}
}

func TestEmuEmbedding(t *testing.T) {
	rng := newRNG(t)
	const B, T, D, V = 3, 7, 40, 11
	wte, wpe, dout := tensortest.Randn(rng, V*D), tensortest.Randn(rng, T*D), tensortest.Randn(rng, B*T*D)
	idx := make([]int64, B*T)
	for i := range idx {
		idx[i] = int64(rng.IntN(V - 2)) // ids V-2, V-1 unused
	}
	out := make([]float32, B*T*D)
	launch(t, "embedding_fwd", kernels.Problem{B: B, T: T, Cols: D}, out, idx, wte, wpe, B, T, D)
	for bt := range B * T {
		for c := range D {
			if w := wte[int(idx[bt])*D+c] + wpe[(bt%T)*D+c]; out[bt*D+c] != w {
				t.Fatalf("embedding_fwd[%d, %d] = %v, want %v", bt, c, out[bt*D+c], w)
			}
		}
	}
	// The scatter-add: positions sorted by id (a stable counting sort).
	count := make([]int, V+1)
	for _, id := range idx {
		count[id+1]++
	}
	var order, segStart, segID []int32
	for id := range V {
		if count[id+1] == 0 {
			continue
		}
		segID = append(segID, int32(id))
		segStart = append(segStart, int32(len(order)))
		for pos, x := range idx {
			if int(x) == id {
				order = append(order, int32(pos))
			}
		}
	}
	segStart = append(segStart, int32(len(order)))
	dwte := tensortest.Randn(rng, V*D)
	want := tensor.FromSlice(append([]float32(nil), dwte...), V, D)
	tensor.IndexAddRows(want, idx, tensor.FromSlice(dout, B*T, D))
	launch(t, "embedding_bwd_wte", kernels.Problem{Segments: len(segID)}, dwte, dout, order, segStart, segID, len(segID), D)
	checkBits(t, "embedding_bwd_wte", dwte, want.Data())

	dwpe := make([]float32, T*D)
	launch(t, "embedding_bwd_wpe", kernels.Problem{T: T, Cols: D}, dwpe, dout, B, T, D)
	wantPE := make([]float32, T*D)
	for b := range B {
		for e := range T * D {
			wantPE[e] += dout[b*T*D+e]
		}
	}
	checkBits(t, "embedding_bwd_wpe", dwpe, wantPE)
}

// classifierRef is cross-entropy with the mean over rows not ignored, in
// float64: the per-row losses and dlogits.
func classifierRef(x []float32, targets []int64, rows, V int, ignore int64) (losses, dlogits []float32) {
	losses, dlogits = make([]float32, rows), make([]float32, rows*V)
	count := 0
	for _, tg := range targets {
		if tg != ignore {
			count++
		}
	}
	for r := range rows {
		row := x[r*V : (r+1)*V]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, float64(v))
		}
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(s)
		if targets[r] == ignore {
			continue
		}
		losses[r] = float32(lse - float64(row[targets[r]]))
		for j, v := range row {
			g := math.Exp(float64(v) - lse)
			if int64(j) == targets[r] {
				g--
			}
			dlogits[r*V+j] = float32(g / float64(count))
		}
	}
	return losses, dlogits
}

func TestEmuClassifier(t *testing.T) {
	rng := newRNG(t)
	const rows, V, ignore = 5, 300, -100
	x := tensortest.Randn(rng, rows*V)
	for i := range x {
		x[i] *= 2
	}
	targets := []int64{3, 299, ignore, 0, 150}
	wantL, wantD := classifierRef(x, targets, rows, V, ignore)
	p := kernels.Problem{Rows: rows, Cols: V}
	logits, losses := append([]float32(nil), x...), make([]float32, rows)
	launch(t, "fused_classifier_f32", p, logits, losses, targets, rows, V, float32(1.0/4), ignore)
	checkRel(t, "losses", losses, wantL, 1e-6)
	checkRel(t, "dlogits", logits, wantD, 1e-5)

	lb := bf16s(x)
	maxAbs := 0.0
	for _, v := range lb {
		maxAbs = max(maxAbs, math.Abs(float64(v.f32())))
	}
	launch(t, "fused_classifier_bf16", p, lb, losses, targets, rows, V, float32(1.0/4), ignore)
	for r, l := range losses {
		if d := math.Abs(float64(l - wantL[r])); d > 2*u*maxAbs {
			t.Errorf("bf16 loss[%d] = %v, want %v within %.3g", r, l, wantL[r], 2*u*maxAbs)
		}
	}
	checkRel(t, "dlogits bf16", widen(lb), wantD, 2*u+2*u*maxAbs)
}

func TestEmuReduce(t *testing.T) {
	rng := newRNG(t)
	const n = 5000
	x := tensortest.Randn(rng, n)
	var sum, sumsq float64
	for _, v := range x {
		sum += float64(v)
		sumsq += float64(v) * float64(v)
	}
	parts := kernels.ReduceParts(n)
	partial, out := make([]float32, parts), make([]float32, 1)
	launch(t, "reduce_sum_partial_f32", kernels.Problem{N: n}, partial, x, n)
	launch(t, "reduce_final", kernels.Problem{Parts: parts}, out, partial, parts, 0)
	if e := math.Abs(float64(out[0])-sum) / math.Sqrt(sumsq); e > 1e-6 {
		t.Errorf("sum = %v, want %v (error %.3g of the 2-norm)", out[0], sum, e)
	}
	launch(t, "reduce_sumsq_partial_bf16", kernels.Problem{N: n}, partial, bf16s(x), n)
	launch(t, "reduce_final", kernels.Problem{Parts: parts}, out, partial, parts, 0)
	if e := math.Abs(float64(out[0])-sumsq) / sumsq; e > 2*u {
		t.Errorf("bf16 sum of squares = %v, want %v (relative %.3g)", out[0], sumsq, e)
	}
	// Global-norm clipping on the device: scale by max_norm/(norm + 1e-6).
	launch(t, "reduce_sumsq_partial_f32", kernels.Problem{N: n}, partial, x, n)
	launch(t, "reduce_final", kernels.Problem{Parts: parts}, out, partial, parts, 0)
	g := append([]float32(nil), x...)
	launch(t, "grad_clip_f32", kernels.Problem{N: n}, g, n, out, float32(1))
	c := float32(1 / (math.Sqrt(float64(out[0])) + 1e-6))
	for i := range g {
		if g[i] != x[i]*c {
			t.Fatalf("grad_clip_f32[%d] = %v, want %v", i, g[i], x[i]*c)
		}
	}
}

func TestEmuOptim(t *testing.T) {
	rng := newRNG(t)
	const n = 600
	for _, h := range []optim.AdamHyper{
		{LR: 1e-3, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Decoupled: true},
		{LR: 3e-4, WeightDecay: 0.01, Beta1: 0.8, Beta2: 0.999, Eps: 1e-6, AMSGrad: true},
		{LR: 1e-2, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, Maximize: true},
	} {
		param := tensortest.Randn(rng, n)
		cpu := append([]float32(nil), param...)
		st := optim.NewAdamState(n, h.AMSGrad)
		m, v, vmax := make([]float32, n), make([]float32, n), make([]float32, n)
		for step := int64(1); step <= 3; step++ {
			grad := tensortest.Randn(rng, n)
			optim.AdamUpdate(cpu, grad, st, h, step)
			s := kernels.NewAdamScalars(h.LR, h.WeightDecay, h.Beta1, h.Beta2, h.Eps, step, h.Decoupled, h.AMSGrad, h.Maximize)
			launch(t, "adam_step_f32", kernels.Problem{N: n}, param, grad, m, v, vmax, n,
				s.Sign, s.Decay, s.L2, s.B1, s.C1, s.B2, s.C2, s.BC2Sqrt, s.Eps, s.StepSize, s.HasL2, s.AMSGrad)
		}
		checkBits(t, "adam_step_f32 param", param, cpu)
		checkBits(t, "adam_step_f32 exp_avg", m, st.ExpAvg)
		checkBits(t, "adam_step_f32 exp_avg_sq", v, st.ExpAvgSq)
	}
	for _, h := range []optim.SGDHyper{
		{LR: 0.1, WeightDecay: 1e-4, Momentum: 0.9, Dampening: 0.1},
		{LR: 0.05, Momentum: 0.9, Nesterov: true},
		{LR: 0.01, WeightDecay: 0.5, Maximize: true},
	} {
		param := tensortest.Randn(rng, n)
		cpu := append([]float32(nil), param...)
		buf, cbuf := make([]float32, n), make([]float32, n)
		for step := int64(1); step <= 3; step++ {
			grad := tensortest.Randn(rng, n)
			optim.SGDUpdate(cpu, grad, cbuf, h, step)
			s := kernels.NewSGDScalars(h.LR, h.WeightDecay, h.Momentum, h.Dampening, h.Nesterov, h.Maximize, step)
			launch(t, "sgd_step_f32", kernels.Problem{N: n}, param, grad, buf, n,
				s.Sign, s.WD, s.Mom, s.Damp, s.LR, s.HasWD, s.Momentum, s.Nesterov, s.First)
		}
		checkBits(t, "sgd_step_f32 param", param, cpu)
		if h.Momentum != 0 {
			checkBits(t, "sgd_step_f32 momentum_buffer", buf, cbuf)
		}
	}
}

func TestEmuConv(t *testing.T) {
	rng := newRNG(t)
	const N, C, H, W, K, stride, pad = 3, 2, 7, 6, 3, 2, 1
	const OH, OW = (H+2*pad-K)/stride + 1, (W+2*pad-K)/stride + 1
	const n0, nb, L = 1, 2, OH * OW
	x := tensortest.Randn(rng, N*C*H*W)
	p := kernels.Problem{C: C, NB: nb, H: H, W: W, KH: K, KW: K, OH: OH, OW: OW}
	col := make([]float32, C*K*K*nb*L)
	launch(t, "im2col_f32", p, col, x, n0, nb, C, H, W, K, K, stride, pad, OH, OW)
	at := func(n, c, ih, iw int) float32 {
		if ih < 0 || ih >= H || iw < 0 || iw >= W {
			return 0
		}
		return x[((n*C+c)*H+ih)*W+iw]
	}
	// eachCol calls f for every element of col, in col's order: its index
	// in col, its coordinates, and the input row and column it reads.
	eachCol := func(f func(i, c, ki, kj, n, oh, ow, ih, iw int)) {
		for c := range C {
			for ki := range K {
				for kj := range K {
					for n := range nb {
						for oh := range OH {
							for ow := range OW {
								f(((c*K+ki)*K+kj)*nb*L+n*L+oh*OW+ow, c, ki, kj, n, oh, ow, oh*stride-pad+ki, ow*stride-pad+kj)
							}
						}
					}
				}
			}
		}
	}
	eachCol(func(i, c, ki, kj, n, oh, ow, ih, iw int) {
		if got, want := col[i], at(n0+n, c, ih, iw); got != want {
			t.Fatalf("im2col[c %d ki %d kj %d n %d oh %d ow %d] = %v, want %v", c, ki, kj, n, oh, ow, got, want)
		}
	})
	// col2im is im2col's adjoint: ⟨im2col(x), g⟩ = ⟨x, col2im(g)⟩, and it
	// adds, in the CPU's order, onto what dx holds.
	g := tensortest.Randn(rng, len(col))
	dx := tensortest.Randn(rng, N*C*H*W)
	before := append([]float32(nil), dx...)
	launch(t, "col2im_f32", p, dx, g, n0, nb, C, H, W, K, K, stride, pad, OH, OW)
	want := append([]float32(nil), before...)
	eachCol(func(i, c, _, _, n, _, _, ih, iw int) {
		if ih >= 0 && ih < H && iw >= 0 && iw < W {
			want[(((n0+n)*C+c)*H+ih)*W+iw] += g[i]
		}
	})
	checkBits(t, "col2im_f32", dx, want)
}

func TestEmuPool(t *testing.T) {
	rng := newRNG(t)
	const N, C, H, W, k, s, pad = 2, 3, 9, 8, 3, 2, 1
	x := tensortest.Randn(rng, N*C*H*W)
	tx := tensor.FromSlice(x, N, C, H, W)
	wantY, wantArg := tensor.MaxPool2d(tx, k, s, pad)
	OH, OW := wantY.Dim(2), wantY.Dim(3)
	p := kernels.Problem{Planes: N * C, H: H, W: W, OH: OH, OW: OW}
	y, arg := make([]float32, N*C*OH*OW), make([]int32, N*C*OH*OW)
	launch(t, "maxpool_fwd", p, y, arg, x, N*C, H, W, OH, OW, k, s, pad)
	checkBits(t, "maxpool_fwd", y, wantY.Data())
	for i := range arg {
		if arg[i] != wantArg[i] {
			t.Fatalf("maxpool_fwd argmax[%d] = %d, want %d", i, arg[i], wantArg[i])
		}
	}
	dy := tensortest.Randn(rng, len(y))
	dx := make([]float32, len(x))
	launch(t, "maxpool_bwd", p, dx, dy, arg, N*C, H, W, OH, OW, k, s, pad)
	checkBits(t, "maxpool_bwd", dx, tensor.MaxPool2dBackward(tensor.FromSlice(dy, N, C, OH, OW), wantArg, tx.Shape()).Data())

	wantA := tensor.AvgPool2d(tx, k, s, pad)
	launch(t, "avgpool_fwd", p, y, x, N*C, H, W, OH, OW, k, s, pad)
	checkRel(t, "avgpool_fwd", y, wantA.Data(), 1e-6)
	launch(t, "avgpool_bwd", p, dx, dy, N*C, H, W, OH, OW, k, s, pad)
	checkRel(t, "avgpool_bwd", dx, tensor.AvgPool2dBackward(tensor.FromSlice(dy, N, C, OH, OW), tx.Shape(), k, s, pad).Data(), 1e-6)
}

func TestEmuCast(t *testing.T) {
	x := []float32{0, -0.0, 1, 1.00390625, 1.005859375, 1.0078125, -3.14159, 1e-40, 3.4e38, float32(math.Inf(-1)), float32(math.NaN()), 65504.7}
	b := make([]bf16, len(x))
	launch(t, "cast_f32_bf16", kernels.Problem{N: int64(len(x))}, b, x, len(x))
	for i := range x {
		if b[i] != toBF16(x[i]) {
			t.Errorf("cast_f32_bf16(%v) = %#04x, want %#04x", x[i], b[i], toBF16(x[i]))
		}
	}
	back := make([]float32, len(x))
	launch(t, "cast_bf16_f32", kernels.Problem{N: int64(len(x))}, back, b, len(x))
	for i := range back {
		if math.Float32bits(back[i]) != uint32(b[i])<<16 {
			t.Errorf("cast_bf16_f32(%#04x) = %v", b[i], back[i])
		}
		normal := math.Abs(float64(x[i])) >= 0x1p-126 // subnormals keep fewer bits
		if normal && !math.IsNaN(float64(x[i])) && !math.IsInf(float64(back[i]), 0) && math.Abs(float64(back[i]-x[i])) > u*math.Abs(float64(x[i])) {
			t.Errorf("cast round trip of %v gave %v, more than u relative", x[i], back[i])
		}
	}
	// Ties go to even: 1 + 2⁻⁸ lies halfway between 1 and 1 + 2⁻⁷.
	if b[3].f32() != 1 || b[4].f32() != 1.0078125 {
		t.Errorf("ties: %v → %v, %v → %v", x[3], b[3].f32(), x[4], b[4].f32())
	}
}

// TestEmuBF16Twins checks bf16 variants whose math is fp32 with one
// rounding per stored result: run on bf16 inputs, each must give exactly
// the bf16 rounding of its f32 twin run on the same (widened) inputs.
func TestEmuBF16Twins(t *testing.T) {
	rng := newRNG(t)
	const n = 300
	a, b := bf16s(tensortest.Randn(rng, n)), bf16s(tensortest.Randn(rng, n))
	fa, fb := widen(a), widen(b)
	p := kernels.Problem{N: n}
	same := func(name string, got []bf16, want []float32) {
		t.Helper()
		for i := range want {
			if got[i] != toBF16(want[i]) {
				t.Errorf("%s_bf16[%d] = %v, want the rounding of %s_f32's %v", name, i, got[i].f32(), name, want[i])
				return
			}
		}
	}
	binary := func(name string) {
		got, want := make([]bf16, n), make([]float32, n)
		launch(t, name+"_bf16", p, got, a, b, n)
		launch(t, name+"_f32", p, want, fa, fb, n)
		same(name, got, want)
	}
	binary("add")
	binary("sub")
	binary("mul")
	binary("relu_bwd")
	{
		got, want := make([]bf16, n), make([]float32, n)
		launch(t, "scale_bf16", p, got, a, float32(-0.7), n)
		launch(t, "scale_f32", p, want, fa, float32(-0.7), n)
		same("scale", got, want)
		launch(t, "relu_fwd_bf16", p, got, a, n)
		launch(t, "relu_fwd_f32", p, want, fa, n)
		same("relu_fwd", got, want)
		got, want = append([]bf16(nil), b...), append([]float32(nil), fb...)
		launch(t, "axpy_bf16", p, got, float32(0.25), a, n)
		launch(t, "axpy_f32", p, want, float32(0.25), fa, n)
		same("axpy", got, want)
		launch(t, "fill_f32", p, want, float32(2.5), n)
		same("fill", bf16s(want), want)
	}
	{
		const rows, cols = 10, 30
		got, want := make([]bf16, n), make([]float32, n)
		launch(t, "bias_add_bf16", kernels.Problem{Rows: rows, Cols: cols}, got, a, b[:cols], rows, cols)
		launch(t, "bias_add_f32", kernels.Problem{Rows: rows, Cols: cols}, want, fa, fb[:cols], rows, cols)
		same("bias_add", got, want)
	}
	{
		const C, H, W, K, OH, OW = 2, 5, 6, 3, 3, 4 // stride 1, pad 0 on [1, 2, 5, 6]
		x := bf16s(tensortest.Randn(rng, C*H*W))
		cp := kernels.Problem{C: C, NB: 1, H: H, W: W, KH: K, KW: K, OH: OH, OW: OW}
		got, want := make([]bf16, C*K*K*OH*OW), make([]float32, C*K*K*OH*OW)
		launch(t, "im2col_bf16", cp, got, x, 0, 1, C, H, W, K, K, 1, 0, OH, OW)
		launch(t, "im2col_f32", cp, want, widen(x), 0, 1, C, H, W, K, K, 1, 0, OH, OW)
		same("im2col", got, want)
		dx, fdx := make([]bf16, C*H*W), make([]float32, C*H*W)
		launch(t, "col2im_bf16", cp, dx, got, 0, 1, C, H, W, K, K, 1, 0, OH, OW)
		launch(t, "col2im_f32", cp, fdx, widen(got), 0, 1, C, H, W, K, K, 1, 0, OH, OW)
		same("col2im", dx, fdx)
	}
	{
		parts := kernels.ReduceParts(n)
		got, want := make([]float32, parts), make([]float32, parts)
		launch(t, "reduce_sum_partial_bf16", p, got, a, n)
		launch(t, "reduce_sum_partial_f32", p, want, fa, n)
		checkBits(t, "reduce_sum_partial_bf16", got, want)
		sumsq := []float32{4}
		g, fg := append([]bf16(nil), a...), append([]float32(nil), fa...)
		launch(t, "grad_clip_bf16", p, g, n, sumsq, float32(1))
		launch(t, "grad_clip_f32", p, fg, n, sumsq, float32(1))
		same("grad_clip", g, fg)
	}
	{
		s := kernels.NewAdamScalars(1e-3, 0.1, 0.9, 0.95, 1e-8, 2, true, false, false)
		param, m, v := tensortest.Randn(rng, n), tensortest.Randn(rng, n), tensortest.Randn(rng, n)
		for i := range v {
			v[i] *= v[i]
		}
		fparam, fm, fv := append([]float32(nil), param...), append([]float32(nil), m...), append([]float32(nil), v...)
		launch(t, "adam_step_bf16", p, param, a, m, v, []float32{}, n, s.Sign, s.Decay, s.L2, s.B1, s.C1, s.B2, s.C2, s.BC2Sqrt, s.Eps, s.StepSize, s.HasL2, s.AMSGrad)
		launch(t, "adam_step_f32", p, fparam, fa, fm, fv, []float32{}, n, s.Sign, s.Decay, s.L2, s.B1, s.C1, s.B2, s.C2, s.BC2Sqrt, s.Eps, s.StepSize, s.HasL2, s.AMSGrad)
		checkBits(t, "adam_step_bf16", param, fparam)
		g := kernels.NewSGDScalars(0.1, 1e-4, 0.9, 0, true, false, 2)
		buf, fbuf := tensortest.Randn(rng, n), []float32(nil)
		fbuf = append(fbuf, buf...)
		launch(t, "sgd_step_bf16", p, param, a, buf, n, g.Sign, g.WD, g.Mom, g.Damp, g.LR, g.HasWD, g.Momentum, g.Nesterov, g.First)
		launch(t, "sgd_step_f32", p, fparam, fa, fbuf, n, g.Sign, g.WD, g.Mom, g.Damp, g.LR, g.HasWD, g.Momentum, g.Nesterov, g.First)
		checkBits(t, "sgd_step_bf16", param, fparam)
	}
}
