package optim_test

import (
	"math"
	"slices"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

func withGrads(grads ...[]float32) []*autograd.Var {
	ps := make([]*autograd.Var, len(grads))
	for i, g := range grads {
		ps[i] = autograd.NewVar(tensor.New(len(g)), true)
		if g != nil {
			ps[i].Grad = tensor.FromSlice(slices.Clone(g), len(g))
		}
	}
	return ps
}

// scaled multiplies vals by coef in float32, as clipping does.
func scaled(coef float64, vals ...float32) []float32 {
	for i := range vals {
		vals[i] *= float32(coef)
	}
	return vals
}

func TestClipGradNorm(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name              string
		grads             [][]float32
		maxNorm, normType float64
		wantNorm          float64
		wantGrads         [][]float32
	}{
		// 3-4-12 has norm 13; scale 6.5/(13+1e-6).
		{"l2_scaled", [][]float32{{3, 4}, {12}}, 6.5, 2, 13,
			[][]float32{scaled(6.5/(13+1e-6), 3, 4), scaled(6.5/(13+1e-6), 12)}},
		{"l2_below_max_untouched", [][]float32{{3, 4}, {12}}, 13.5, 2, 13, [][]float32{{3, 4}, {12}}},
		{"inf_norm", [][]float32{{-5, 1}, {2}}, 1, inf, 5,
			[][]float32{scaled(1/(5+1e-6), -5, 1), scaled(1/(5+1e-6), 2)}},
		{"one_norm", [][]float32{{-1, 1}, {2}}, 8, 1, 4, [][]float32{{-1, 1}, {2}}},
		{"nil_grads_ignored", [][]float32{nil, {3, 4}}, 100, 2, 5, [][]float32{nil, {3, 4}}},
		{"no_grads", [][]float32{nil}, 1, 2, 0, [][]float32{nil}},
		{"zero_max_norm", [][]float32{{3, 4}}, 0, 2, 5, [][]float32{{0, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := withGrads(tc.grads...)
			got, err := optim.ClipGradNorm(ps, tc.maxNorm, tc.normType)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got-tc.wantNorm) > 1e-12*tc.wantNorm {
				t.Errorf("norm = %v, want %v", got, tc.wantNorm)
			}
			for i, p := range ps {
				if tc.wantGrads[i] == nil {
					if p.Grad != nil {
						t.Errorf("param %d gained a Grad", i)
					}
					continue
				}
				if !slices.Equal(p.Grad.Data(), tc.wantGrads[i]) {
					t.Errorf("grad %d = %v, want %v", i, p.Grad.Data(), tc.wantGrads[i])
				}
			}
		})
	}
}

func TestClipGradNormErrors(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name              string
		grads             [][]float32
		maxNorm, normType float64
		sentinel          error
		want              string
	}{
		{"negative_max_norm", [][]float32{{1}}, -1, 2, optim.ErrInvalid, "optim: ClipGradNorm: maxNorm = -1, want >= 0"},
		{"nan_max_norm", [][]float32{{1}}, math.NaN(), 2, optim.ErrInvalid, "maxNorm = NaN"},
		{"zero_norm_type", [][]float32{{1}}, 1, 0, optim.ErrInvalid, "normType = 0, want p > 0 or +Inf"},
		{"minus_inf_norm_type", [][]float32{{1}}, 1, math.Inf(-1), optim.ErrInvalid, "normType = -Inf"},
		{"nan_grad", [][]float32{{1, nan}, {2}}, 1, 2, optim.ErrNonFiniteNorm, "total 2-norm is NaN"},
		{"inf_grad", [][]float32{{1}, {inf}}, 1, 2, optim.ErrNonFiniteNorm, "total 2-norm is +Inf"},
		{"nan_grad_inf_norm", [][]float32{{5, nan}}, 1, math.Inf(1), optim.ErrNonFiniteNorm, "total +Inf-norm is NaN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := withGrads(tc.grads...)
			_, err := optim.ClipGradNorm(ps, tc.maxNorm, tc.normType)
			wantErr(t, err, tc.sentinel, tc.want)
			for i, p := range ps {
				if !sameBits(p.Grad.Data(), tc.grads[i]) {
					t.Fatalf("grad %d changed to %v on error", i, p.Grad.Data())
				}
			}
		})
	}
}

// Norms accumulate in float64, so float32 gradients near the top of their
// range still clip to finite values.
func TestClipGradNormHugeGradients(t *testing.T) {
	ps := withGrads([]float32{3e38, -3e38})
	norm, err := optim.ClipGradNorm(ps, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3e38 * math.Sqrt2; math.Abs(norm-want) > 1e-6*want {
		t.Fatalf("norm = %v, want %v", norm, want)
	}
	for _, g := range ps[0].Grad.Data() {
		if math.Abs(math.Abs(float64(g))-math.Sqrt2/2) > 1e-6 {
			t.Fatalf("clipped grads %v, want ±0.7071", ps[0].Grad.Data())
		}
	}
}
