package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// convPaths runs f with the Go tiles and, where the CPU has them, the
// AVX-512 ones.
func convPaths(t *testing.T, f func(t *testing.T)) { implPaths(t, &useAVX512, "avx512", f) }

func normals(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// closeTo reports whether got is want to float32 rounding of a sum whose
// terms have absolute values adding up to scale.
func closeTo(got float32, want, scale float64) bool {
	return math.Abs(float64(got)-want) <= 1e-5*(scale+1)
}

func TestConvTile6x64(t *testing.T) {
	convPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(21, 22))
		for _, c := range []struct{ rows, cols, taps int }{
			{6, 64, 25}, {6, 60, 25}, {4, 64, 150}, {6, 8, 150}, {1, 1, 1}, {3, 17, 7}, {6, 33, 0}, {5, 48, 9},
		} {
			t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
				a := normals(rng, 6*c.taps)
				for kk := 0; kk < c.taps; kk++ {
					for r := c.rows; r < 6; r++ {
						a[6*kk+r] = 0
					}
				}
				x := normals(rng, 300+c.cols)
				offs := make([]int, c.taps)
				for i := range offs {
					offs[i] = rng.IntN(300)
				}
				ldc := c.cols + rng.IntN(5)
				out := normals(rng, 6*ldc) // stale values must be overwritten
				before := append([]float32(nil), out...)
				ConvTile6x64(out, ldc, c.rows, c.cols, a, offs, x)
				for r := 0; r < 6; r++ {
					for j := 0; j < ldc; j++ {
						got := out[r*ldc+j]
						if r >= c.rows || j >= c.cols {
							if got != before[r*ldc+j] {
								t.Fatalf("c[%d][%d] outside the tile changed", r, j)
							}
							continue
						}
						var want, scale float64
						for kk, o := range offs {
							p := float64(a[6*kk+r]) * float64(x[o+j])
							want += p
							scale += math.Abs(p)
						}
						if !closeTo(got, want, scale) {
							t.Fatalf("c[%d][%d] = %g, want %g", r, j, got, want)
						}
					}
				}
			})
		}
	})
}

func TestDot4x6(t *testing.T) {
	convPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(23, 24))
		for _, c := range []struct{ n, m, as, bs int }{
			{892, 1, 1024, 892}, {136, 3, 1176, 136}, {1, 1, 1, 1}, {15, 2, 20, 17}, {16, 4, 16, 16}, {33, 5, 40, 50},
		} {
			t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
				var a [4][]float32
				var b [6][]float32
				for i := range a {
					a[i] = normals(rng, (c.m-1)*c.as+c.n)
				}
				for j := range b {
					b[j] = normals(rng, (c.m-1)*c.bs+c.n)
				}
				acc := normals(rng, 24*16) // accumulated into
				start := make([]float64, 24)
				for k := range start {
					for l := 0; l < 16; l++ {
						start[k] += float64(acc[k*16+l])
					}
				}
				Dot4x6(acc, c.n, c.m, a, c.as, b, c.bs)
				for i := range a {
					for j := range b {
						want, scale := start[6*i+j], math.Abs(start[6*i+j])
						for s := 0; s < c.m; s++ {
							for p := 0; p < c.n; p++ {
								v := float64(a[i][s*c.as+p]) * float64(b[j][s*c.bs+p])
								want += v
								scale += math.Abs(v)
							}
						}
						if got := Sum16(acc[(6*i+j)*16:]); !closeTo(got, want, scale) {
							t.Fatalf("pair (%d, %d) = %g, want %g", i, j, got, want)
						}
					}
				}
			})
		}
	})
}
