package tensor

import (
	"fmt"
	"github.com/cohortml/cohort/tensor/tensortest"
	"math"
	"testing"
)

func TestSoftmax(t *testing.T) {
	rng := newRNG(8)
	for _, shape := range [][]int{{3, 5}, {2, 3, 4}} {
		for dim := 0; dim < len(shape); dim++ {
			t.Run(fmt.Sprintf("%v/dim%d", shape, dim), func(t *testing.T) {
				x := Scale(randT(rng, shape...), 3)
				dy := randT(rng, shape...)
				y, ly := Softmax(x, dim), LogSoftmax(x, dim)
				// Reference over each fibre along dim.
				wy, wly := make([]float32, x.Len()), make([]float32, x.Len())
				wdx, wdlx := make([]float32, x.Len()), make([]float32, x.Len())
				st := contiguousStrides(shape)
				tensortest.ForEachIndex(keptShape(shape, dim), func(idx []int) {
					base := 0
					for i, v := range idx {
						base += v * st[i]
					}
					n := shape[dim]
					var z float64
					for j := 0; j < n; j++ {
						z += math.Exp(float64(x.Data()[base+j*st[dim]]))
					}
					var sdy, sdyp float64
					for j := 0; j < n; j++ {
						k := base + j*st[dim]
						p := math.Exp(float64(x.Data()[k])) / z
						sdy += float64(dy.Data()[k])
						sdyp += float64(dy.Data()[k]) * p
					}
					for j := 0; j < n; j++ {
						k := base + j*st[dim]
						p := math.Exp(float64(x.Data()[k])) / z
						wy[k], wly[k] = float32(p), float32(math.Log(p))
						wdx[k] = float32(p * (float64(dy.Data()[k]) - sdyp))
						wdlx[k] = float32(float64(dy.Data()[k]) - p*sdy)
					}
				})
				assertClose(t, "softmax", y.Data(), wy, 1e-5)
				assertClose(t, "log_softmax", ly.Data(), wly, 1e-5)
				assertClose(t, "softmax grad", SoftmaxBackward(y, dy, dim).Data(), wdx, 1e-5)
				assertClose(t, "log_softmax grad", LogSoftmaxBackward(ly, dy, dim).Data(), wdlx, 1e-5)
			})
		}
	}
	t.Run("large_and_masked", func(t *testing.T) {
		inf := float32(math.Inf(-1))
		y := Softmax(FromSlice([]float32{1000, 1000, inf}, 1, 3), -1).Data()
		assertClose(t, "softmax", y, []float32{0.5, 0.5, 0}, 1e-7)
	})
}

func TestLayerNorm(t *testing.T) {
	rng := newRNG(9)
	x := randT(rng, 2, 3, 8)
	w, b := randT(rng, 8), randT(rng, 8)
	y, mean, rstd := LayerNorm(x, w, b, 1e-5)
	dy := randT(rng, 2, 3, 8)
	dx, dw, db := LayerNormBackward(dy, x, w, mean, rstd)
	// Reference forward, and gradients by central differences in float64.
	ref := func(xs []float64, ws, bs []float64) []float64 {
		out := make([]float64, len(xs))
		for r := 0; r < len(xs)/8; r++ {
			row := xs[r*8 : r*8+8]
			var m, v float64
			for _, e := range row {
				m += e / 8
			}
			for _, e := range row {
				v += (e - m) * (e - m) / 8
			}
			for j, e := range row {
				out[r*8+j] = (e-m)/math.Sqrt(v+1e-5)*ws[j] + bs[j]
			}
		}
		return out
	}
	f64 := func(t *Tensor) []float64 {
		var o []float64
		for _, v := range t.Data() {
			o = append(o, float64(v))
		}
		return o
	}
	xs, ws, bs, gs := f64(x), f64(w), f64(b), f64(dy)
	loss := func() float64 {
		var s float64
		for i, v := range ref(xs, ws, bs) {
			s += v * gs[i]
		}
		return s
	}
	numGrad := func(p []float64) []float32 {
		g := make([]float32, len(p))
		for i := range p {
			old := p[i]
			p[i] = old + 1e-6
			lp := loss()
			p[i] = old - 1e-6
			lm := loss()
			p[i] = old
			g[i] = float32((lp - lm) / 2e-6)
		}
		return g
	}
	wantY := make([]float32, 0, x.Len())
	for _, v := range ref(xs, ws, bs) {
		wantY = append(wantY, float32(v))
	}
	assertClose(t, "y", y.Data(), wantY, 1e-5)
	assertClose(t, "dx", dx.Data(), numGrad(xs), 1e-4)
	assertClose(t, "dw", dw.Data(), numGrad(ws), 1e-4)
	assertClose(t, "db", db.Data(), numGrad(bs), 1e-4)
	mustPanic(t, func() { LayerNorm(x, New(7), nil, 1e-5) }, "LayerNorm", "[7]", "[2 3 8]")
}

func TestIndexRows(t *testing.T) {
	w := arange(5, 3)
	got := IndexRows(w, []int64{4, 0, 4})
	assertClose(t, "rows", got.Data(), []float32{12, 13, 14, 0, 1, 2, 12, 13, 14}, 0)
	d := New(5, 3)
	IndexAddRows(d, []int64{4, 0, 4}, got)
	assertClose(t, "scatter", d.Data(), []float32{0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24, 26, 28}, 0)
	mustPanic(t, func() { IndexRows(w, []int64{5}) }, "IndexRows", "index 5", "[5 3]")
	mustPanic(t, func() { IndexRows(w, []int64{-1}) }, "IndexRows", "index -1")
}

func TestFillDeterministic(t *testing.T) {
	a, b := New(100), New(100)
	a.FillUniform(newRNG(1), -0.5, 0.5)
	b.FillUniform(newRNG(1), -0.5, 0.5)
	assertClose(t, "same seed", a.Data(), b.Data(), 0)
	for _, v := range a.Data() {
		if v < -0.5 || v >= 0.5 {
			t.Fatalf("uniform value %g outside [-0.5, 0.5)", v)
		}
	}
	n := New(20000)
	n.FillNormal(newRNG(2), 1, 2)
	m := float64(Mean(n).Item())
	v := float64(Mean(Square(AddScalar(n, float32(-m)))).Item())
	if math.Abs(m-1) > 0.05 || math.Abs(v-4) > 0.2 {
		t.Errorf("normal(1, 2): mean %g variance %g", m, v)
	}
}
