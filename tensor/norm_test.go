package tensor

import (
	"math"
	"testing"
)

// TestLayerNormBackwardAdd: adding the input gradient onto an accumulator
// gives AddScaled(acc, 1, dx) after LayerNormBackward bit for bit, with the
// same weight and bias gradients, serially and in parallel, and with the
// accumulator being the output gradient itself.
func TestLayerNormBackwardAdd(t *testing.T) {
	rng := newRNG(31)
	for _, shape := range [][]int{{1, 8}, {3, 5}, {130, 128}, {2, 70, 24}} {
		for _, serial := range []bool{true, false} {
			serialOnly = serial
			D := shape[len(shape)-1]
			x, dy, w, b, acc := New(shape...), New(shape...), New(D), New(D), New(shape...)
			for _, v := range []*Tensor{x, dy, w, b, acc} {
				v.FillNormal(rng, 0, 1)
			}
			_, mean, rstd := LayerNorm(x, w, b, 1e-5)
			dx, wantDW, wantDB := LayerNormBackward(dy, x, w, mean, rstd)
			want := acc.Clone()
			AddScaled(want, 1, dx)
			gotDW, gotDB := LayerNormBackwardAdd(acc, dy, x, w, mean, rstd)
			// The output gradient as its own accumulator.
			self := dy.Clone()
			wantSelf := dy.Clone()
			AddScaled(wantSelf, 1, dx)
			LayerNormBackwardAdd(self, self, x, w, mean, rstd)
			for name, pair := range map[string][2]*Tensor{"acc": {acc, want}, "dw": {gotDW, wantDW}, "db": {gotDB, wantDB}, "self": {self, wantSelf}} {
				g, wd := pair[0].Data(), pair[1].Data()
				for i := range g {
					if math.Float32bits(g[i]) != math.Float32bits(wd[i]) {
						t.Fatalf("%v serial=%v: %s[%d] = %v, want %v", shape, serial, name, i, g[i], wd[i])
					}
				}
			}
		}
	}
	serialOnly = false
	mustPanic(t, func() { LayerNormBackwardAdd(New(2, 3), New(2, 3), New(2, 3), nil, nil, nil) }, "LayerNormBackwardAdd")
}
