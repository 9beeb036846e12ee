package tensor

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/tensor/internal/gemm"
)

// TestMathKernelsFollowGEMM checks that the pure-Go GEMM configuration
// (COHORT_GEMM_KERNEL=go) also selects the portable transcendental kernels.
func TestMathKernelsFollowGEMM(t *testing.T) {
	g, err := gemm.Default()
	if err != nil {
		t.Skipf("gemm configuration: %v", err)
	}
	if g.Kernel() == gemm.KernelGo && mathKernels().Asm() {
		t.Errorf("GEMM kernel %q but the math kernels run assembly", g.Kernel())
	}
	t.Logf("GEMM kernel %q, math kernels in assembly: %v", g.Kernel(), mathKernels().Asm())
}

func TestSoftmaxRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, c int }{{1, 1}, {3, 7}, {4, 256}, {2, 33}} {
		x := New(tc.n, tc.c)
		x.FillNormal(rng, 0, 3)
		p := New(tc.n, tc.c)
		lse := SoftmaxRows(p, x)
		for i := 0; i < tc.n; i++ {
			var z float64
			row := x.Data()[i*tc.c : (i+1)*tc.c]
			for _, v := range row {
				z += math.Exp(float64(v))
			}
			if math.Abs(lse[i]-math.Log(z)) > 1e-5*(1+math.Abs(lse[i])) {
				t.Errorf("n=%d c=%d: lse[%d] = %g, want %g", tc.n, tc.c, i, lse[i], math.Log(z))
			}
			for j, v := range row {
				want := math.Exp(float64(v)) / z
				if got := float64(p.Data()[i*tc.c+j]); math.Abs(got-want) > 1e-6*(1+want) {
					t.Fatalf("n=%d c=%d: p[%d][%d] = %g, want %g", tc.n, tc.c, i, j, got, want)
				}
			}
		}
	}
}

// TestLinearInto: the epilogue gives, bitwise, the product, then the bias
// added, then the residual, then the activation of each row, for every
// combination of bias, residual and activation, widths on and off the
// vector lanes, k over several GEMM slabs, and batches the GEMM splits
// into blocks. (GELU-tanh over the whole tensor at once may differ within
// the kernels' error bound: its vector and scalar parts fall elsewhere.)
func TestLinearInto(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ m, k, n int }{{1, 1, 1}, {7, 40, 13}, {33, 128, 512}, {300, 300, 70}, {5, 9, 0}, {0, 4, 3}} {
		for _, act := range []Activation{Identity, ReLUAct, GELUTanhAct} {
			for _, withB := range []bool{false, true} {
				for _, withR := range []bool{false, true} {
					x, w, b, r := New(tc.m, tc.k), New(tc.n, tc.k), New(tc.n), New(tc.m, tc.n)
					x.FillNormal(rng, 0, 1)
					w.FillNormal(rng, 0, 1)
					b.FillNormal(rng, 0, 1)
					r.FillNormal(rng, 0, 1)
					want := New(tc.m, tc.n)
					Gemm(want, x, w.T(), 1, 0)
					wantY := New(tc.m, tc.n)
					for i := range tc.m {
						row := want.Narrow(0, i, 1).Reshape(tc.n)
						if withB {
							AddInto(row, row, b)
						}
						if withR {
							AddInto(row, row, r.Narrow(0, i, 1).Reshape(tc.n))
						}
						switch act {
						case ReLUAct:
							ReLUInto(row, row)
						case GELUTanhAct:
							GELUTanhInto(wantY.Narrow(0, i, 1), want.Narrow(0, i, 1))
						}
					}
					var bb, rr, y *Tensor
					if withB {
						bb = b
					}
					if withR {
						rr = r
					}
					if act == GELUTanhAct {
						y = Full(float32(math.NaN()), tc.m, tc.n)
					}
					h := Full(float32(math.NaN()), tc.m, tc.n)
					LinearInto(h, x, w, bb, rr, y, act)
					for i, v := range want.Data() {
						if h.Data()[i] != v || y != nil && y.Data()[i] != wantY.Data()[i] {
							got := float32(0)
							if y != nil {
								got = y.Data()[i]
							}
							t.Fatalf("%v act %d bias %v residual %v: element %d: h %v, y %v; want %v, %v", tc, act, withB, withR, i, h.Data()[i], got, v, wantY.Data()[i])
						}
					}
				}
			}
		}
	}
	mustPanic(t, func() { LinearInto(New(2, 4), New(2, 3), New(4, 3), New(5), nil, nil, Identity) }, "LinearInto")
	mustPanic(t, func() { LinearInto(New(2, 4), New(2, 3), New(4, 3), nil, New(2, 5), nil, Identity) }, "LinearInto")
	mustPanic(t, func() { LinearInto(New(2, 4), New(2, 3), New(4, 3), nil, nil, nil, GELUTanhAct) }, "LinearInto")
	mustPanic(t, func() { LinearInto(New(2, 4), New(2, 3), New(4, 3), nil, nil, New(2, 4), ReLUAct) }, "LinearInto")
}

// TestParallelMatchesSerial: the kernels that share the GEMM's threads
// (attention by sequence, GELU passes by range, LayerNorm and softmax by
// row, large elementwise sums by range) give bitwise what one thread
// does.
func TestParallelMatchesSerial(t *testing.T) {
	if g, err := gemm.Default(); err != nil || g.Threads() < 2 {
		t.Skip("the GEMM runs on one thread here")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	qkv, dy := New(6, 16, 3*32), New(6, 16, 32)
	qkv.FillNormal(rng, 0, 1)
	dy.FillNormal(rng, 0, 1)
	h, b, g := New(300, 520), New(520), New(300, 520)
	h.FillNormal(rng, 0, 2)
	b.FillNormal(rng, 0, 1)
	g.FillNormal(rng, 0, 1)
	run := func() []*Tensor {
		y, p := AttentionQKV(qkv, 4, true)
		dq := AttentionQKVBackward(dy, qkv, p, 4, true)
		hh := h.Clone()
		gy := New(300, 520)
		LinearInto(hh, h, Full(0.01, 520, 520), b, nil, gy, GELUTanhAct)
		gg := GELUTanhBackward(g, hh)
		ln, mean, rstd := LayerNorm(h, b, b, 1e-5)
		dx, dw, db := LayerNormBackward(g, h, b, mean, rstd)
		sm := New(300, 520)
		lse := SoftmaxRows(sm, h)
		lseT := New(len(lse))
		for i, v := range lse {
			lseT.Data()[i] = float32(v)
		}
		big, other := New(3, 100000), New(3, 100000)
		big.FillNormal(rand.New(rand.NewPCG(7, 8)), 0, 1)
		other.FillNormal(rand.New(rand.NewPCG(9, 10)), 0, 1)
		sum := Add(big, other)
		AddScaled(big, 1, other)
		AddScaled(big, -0.5, sum)
		return []*Tensor{y, p, dq, hh, gy, gg, ln, dx, dw, db, sm, lseT, sum, big}
	}
	par := run()
	serialOnly = true
	defer func() { serialOnly = false }()
	ser := run()
	for i := range par {
		for j, v := range ser[i].Data() {
			if got := par[i].Data()[j]; got != v && !(math.IsNaN(float64(got)) && math.IsNaN(float64(v))) {
				t.Fatalf("result %d element %d: %v in parallel, %v on one thread", i, j, got, v)
			}
		}
	}
}

// TestGELUTanhBackwardSumInto: the gradient and the bias sums, made block
// by block on one thread or in two passes otherwise, equal
// GELUTanhBackwardInto followed by SumInto bit for bit, the bias sums
// added onto what db held.
func TestGELUTanhBackwardSumInto(t *testing.T) {
	rng := newRNG(21)
	for _, shape := range [][]int{{1, 1}, {7, 9}, {3, 5, 512}, {100, 128}, {2, 16, 3}} {
		for _, serial := range []bool{true, false} {
			serialOnly = serial
			x, dy, db := New(shape...), New(shape...), New(shape[len(shape)-1])
			x.FillNormal(rng, 0, 2)
			dy.FillNormal(rng, 0, 1)
			db.FillNormal(rng, 0, 1)
			want := GELUTanhBackwardInto(New(shape...), dy, x)
			wantDB := SumInto(db.Clone(), want)
			got := GELUTanhBackwardSumInto(New(shape...), dy, x, db)
			for name, pair := range map[string][2][]float32{"gradient": {got.Data(), want.Data()}, "bias": {db.Data(), wantDB.Data()}} {
				for i := range pair[0] {
					if math.Float32bits(pair[0][i]) != math.Float32bits(pair[1][i]) {
						t.Fatalf("%v serial=%v: %s[%d] = %v, want %v", shape, serial, name, i, pair[0][i], pair[1][i])
					}
				}
			}
		}
	}
	serialOnly = false
	mustPanic(t, func() { GELUTanhBackwardSumInto(New(2, 3), New(2, 3), New(2, 3), New(2)) }, "GELUTanhBackwardSumInto", "[2]")
}
