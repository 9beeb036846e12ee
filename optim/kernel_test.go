package optim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/cpu"
)

// specialValues mixes ordinary numbers with the values where vector and
// scalar code could part ways: signed zeros, subnormals, infinities, NaN.
func specialValues(rng *rand.Rand, n int) []float32 {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -3e-39, float32(math.Inf(1)),
		float32(math.Inf(-1)), float32(math.NaN()), 3e38, -1e-20}
	s := make([]float32, n)
	for i := range s {
		if rng.IntN(8) == 0 {
			s[i] = specials[rng.IntN(len(specials))]
		} else {
			s[i] = float32(rng.NormFloat64())
		}
	}
	return s
}

// sameValues compares bit patterns, treating any two NaNs as equal.
func sameValues(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool {
		return math.Float32bits(x) == math.Float32bits(y) || (x != x && y != y)
	})
}

// The dispatching kernels (AVX2 blocks plus a Go tail) must reproduce the
// plain Go loops exactly, for every length and option combination.
func TestKernelsMatchGo(t *testing.T) {
	if runtime.GOARCH != "amd64" || !cpu.X86.HasAVX2 {
		t.Skip("no vector kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 64, 1000, 1027} {
		for opts := range 16 {
			sgd := sgdConsts{sign: 1, wd: 0.01, mom: 0.9, damp: 0.7, lr: 0.05,
				hasWD: uint32(opts & 1), momentum: uint32(opts >> 1 & 1), nesterov: uint32(opts >> 2 & 1)}
			adam := adamConsts{sign: 1, decay: 1, l2: 0.1, b1: 0.9, c1: 0.1, b2: 0.999, c2: 1 - 0.999,
				bc2Sqrt: 0.0316, eps: 1e-8, stepSize: -0.1, hasL2: uint32(opts & 1), amsgrad: uint32(opts >> 1 & 1)}
			if opts&4 != 0 {
				adam.decay, adam.hasL2 = 0.999, 0
			}
			if opts&8 != 0 {
				sgd.sign, adam.sign = -1, -1
			}
			t.Run(fmt.Sprintf("n=%d/opts=%04b", n, opts), func(t *testing.T) {
				p, g, b := specialValues(rng, n), specialValues(rng, n), specialValues(rng, n)
				for _, first := range []bool{true, false} {
					p1, b1 := slices.Clone(p), slices.Clone(b)
					p2, b2 := slices.Clone(p), slices.Clone(b)
					sgdKernel(p1, g, b1, &sgd, first)
					sgdGo(p2, g, b2, &sgd, first)
					if !sameValues(p1, p2) || !sameValues(b1, b2) {
						t.Fatalf("sgd (first=%v): kernel and Go loop differ", first)
					}
				}
				m, v, vmax := specialValues(rng, n), specialValues(rng, n), specialValues(rng, n)
				for i := range v {
					v[i] = float32(math.Abs(float64(v[i])))
				}
				s1 := [][]float32{slices.Clone(p), slices.Clone(m), slices.Clone(v), slices.Clone(vmax)}
				s2 := [][]float32{slices.Clone(p), slices.Clone(m), slices.Clone(v), slices.Clone(vmax)}
				adamKernel(s1[0], g, s1[1], s1[2], s1[3], &adam)
				adamGo(s2[0], g, s2[1], s2[2], s2[3], &adam)
				for i := range s1 {
					if !sameValues(s1[i], s2[i]) {
						t.Fatalf("adam: kernel and Go loop differ in slice %d", i)
					}
				}
			})
		}
	}
}

func TestSumSquares(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	for _, n := range []int{0, 1, 15, 16, 17, 33, 1000, 4099} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			x := make([]float32, n)
			want := 0.0 // exact enough: float64 of float32 squares, sequential
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 1e3)
				want += float64(x[i]) * float64(x[i])
			}
			if got := sumSquares(x); math.Abs(got-want) > 1e-12*want {
				t.Fatalf("sumSquares = %v, want %v", got, want)
			}
		})
	}
	if got := sumSquares([]float32{float32(math.NaN()), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}); !math.IsNaN(got) {
		t.Fatalf("sumSquares with a NaN = %v", got)
	}
}

// BenchmarkKernels compares the dispatching kernels with the portable Go
// loops on 1M elements (momentum SGD after its first step, AdamW).
func BenchmarkKernels(b *testing.B) {
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(1, 1))
	p, g, buf, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range p {
		p[i], g[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()*1e-2)
	}
	sgd := sgdConsts{sign: 1, wd: 0.01, mom: 0.9, damp: 1, lr: 1e-3, hasWD: 1, momentum: 1}
	adam := adamConsts{sign: 1, decay: 1 - 1e-5, b1: 0.9, c1: 0.1, b2: 0.999, c2: 1 - 0.999, bc2Sqrt: 0.5, eps: 1e-8, stepSize: -1e-3}
	for _, bc := range []struct {
		name string
		f    func()
	}{
		{"sgd_momentum/go", func() { sgdGo(p, g, buf, &sgd, false) }},
		{"sgd_momentum/dispatch", func() { sgdKernel(p, g, buf, &sgd, false) }},
		{"adamw/go", func() { adamGo(p, g, m, v, nil, &adam) }},
		{"adamw/dispatch", func() { adamKernel(p, g, m, v, nil, &adam) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.f()
			}
			b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elems/ns")
		})
	}
}
