package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// paths runs f once per implementation this machine has, named.
func paths(t *testing.T, f func(t *testing.T)) {
	has := useAVX2
	defer func() { useAVX2 = has }()
	useAVX2 = false
	t.Run("go", f)
	if has {
		useAVX2 = true
		t.Run("avx2", f)
	}
}

// special values every kernel must handle as Go does.
var special = []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1, -1, 1e-40, -1e-40}

// randVals returns n values: mostly normal, some special, some repeated
// (ties for pooling).
func randVals(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch r := rng.IntN(10); {
		case r == 0:
			v[i] = special[rng.IntN(len(special))]
		case r == 1 && i > 0:
			v[i] = v[rng.IntN(i)]
		default:
			v[i] = float32(rng.NormFloat64())
		}
	}
	return v
}

// same reports whether a and b are the same float32 bits, any NaN
// matching any NaN.
func same(a, b float32) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

func checkSame(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if !same(got[i], want[i]) {
			t.Fatalf("%s[%d] = %g (%#x), want %g (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

var lengths = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257}

func TestAdd(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, n := range lengths {
			dst, src := randVals(rng, n+3), randVals(rng, n+3)
			want := append([]float32(nil), dst...)
			for i := 0; i < n; i++ {
				want[i] = dst[i] + src[i]
			}
			Add(dst[:n], src)
			checkSame(t, fmt.Sprintf("n=%d", n), dst, want) // the 3 past n untouched
		}
	})
}

func TestAddRows(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, c := range []struct{ rows, cols, ds, ss int }{
			{0, 5, 5, 5}, {1, 0, 3, 3}, {1, 1, 1, 1}, {3, 10, 14, 14}, {10, 10, 18, 14}, {28, 28, 32, 32}, {4, 17, 17, 20}, {2, 8, 8, 8},
		} {
			dst, src := randVals(rng, c.rows*c.ds+c.cols+2), randVals(rng, c.rows*c.ss+c.cols)
			want := append([]float32(nil), dst...)
			for r := 0; r < c.rows; r++ {
				for j := 0; j < c.cols; j++ {
					want[r*c.ds+j] += src[r*c.ss+j]
				}
			}
			AddRows(dst, c.ds, src, c.ss, c.rows, c.cols)
			checkSame(t, fmt.Sprintf("%+v", c), dst, want)
		}
	})
}

func TestReLUAndBias(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, n := range lengths {
			src := randVals(rng, n)
			for _, bias := range []float32{0, float32(math.Copysign(0, -1)), 0.5, -0.25} {
				for _, relu := range []bool{false, true} {
					want := make([]float32, n)
					for i, v := range src {
						want[i] = v + bias
						if relu {
							want[i] = max(want[i], 0)
						}
					}
					got := make([]float32, n)
					Bias(got, src, bias, relu)
					checkSame(t, fmt.Sprintf("bias n=%d b=%g relu=%v", n, bias, relu), got, want)
				}
			}
			want := make([]float32, n)
			for i, v := range src {
				want[i] = max(v, 0)
			}
			got := append([]float32(nil), src...)
			ReLU(got, got) // in place
			checkSame(t, fmt.Sprintf("relu n=%d", n), got, want)
		}
	})
}

func TestReLUMask(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, n := range lengths {
			y := randVals(rng, n)
			for i, v := range y {
				y[i] = max(v, 0) // a ReLU output
				if rng.IntN(5) == 0 {
					y[i] = float32(math.Copysign(0, -1))
				}
			}
			g := randVals(rng, n)
			want := make([]float32, n)
			for i := range y {
				if y[i] != 0 {
					want[i] = g[i]
				}
			}
			got := make([]float32, n)
			ReLUMask(got, g, y)
			checkSame(t, fmt.Sprintf("n=%d", n), got, want)
		}
	})
}

// naivePool is MaxPool2 written out with explicit comparisons.
func naivePool(n int, r0, r1 []float32, bias float32, useBias, relu bool, base, w int) ([]float32, []int32) {
	dst, arg := make([]float32, n), make([]int32, n)
	for i := 0; i < n; i++ {
		vals := []float32{r0[2*i], r0[2*i+1], r1[2*i], r1[2*i+1]}
		offs := []int{0, 1, w, w + 1}
		best, bi := float32(0), 0
		for k, v := range vals {
			if useBias {
				v += bias
			}
			if k == 0 || v > best || v != v {
				best, bi = v, offs[k]
			}
		}
		if relu {
			best = max(best, 0)
		}
		dst[i], arg[i] = best, int32(base+2*i+bi)
	}
	return dst, arg
}

func TestMaxPool2(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 10))
		for _, n := range lengths {
			for _, c := range []struct {
				bias          float32
				useBias, relu bool
			}{{0, false, false}, {0.5, true, true}, {0, true, true}, {-0.3, true, false}, {0, false, true}} {
				r0, r1 := randVals(rng, 2*n+1), randVals(rng, 2*n+1)
				base, w := rng.IntN(100), 2*n+1+rng.IntN(3)
				wd, wa := naivePool(n, r0, r1, c.bias, c.useBias, c.relu, base, w)
				got, arg := make([]float32, n), make([]int32, n)
				MaxPool2(got, arg, r0, r1, c.bias, c.useBias, c.relu, base, w)
				name := fmt.Sprintf("n=%d %+v", n, c)
				checkSame(t, name, got, wd)
				for i := range arg {
					if arg[i] != wa[i] {
						t.Fatalf("%s: arg[%d] = %d, want %d (window %g %g %g %g)", name, i, arg[i], wa[i], r0[2*i], r0[2*i+1], r1[2*i], r1[2*i+1])
					}
				}
			}
		}
	})
}

func TestMaxPool2Plane(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 12))
		for _, c := range []struct{ rows, cols, stride, w int }{{1, 1, 2, 2}, {14, 14, 32, 28}, {5, 5, 14, 10}, {3, 9, 19, 19}} {
			src := randVals(rng, 2*c.rows*c.stride)
			dst, arg := make([]float32, c.rows*c.cols), make([]int32, c.rows*c.cols)
			MaxPool2Plane(dst, arg, src, c.rows, c.cols, c.stride, 0.5, true, true, c.w)
			for r := 0; r < c.rows; r++ {
				wd, wa := naivePool(c.cols, src[2*r*c.stride:], src[(2*r+1)*c.stride:], 0.5, true, true, 2*r*c.w, c.w)
				checkSame(t, fmt.Sprintf("%+v row %d", c, r), dst[r*c.cols:][:c.cols], wd)
				for i := range wa {
					if arg[r*c.cols+i] != wa[i] {
						t.Fatalf("%+v: arg[%d][%d] = %d, want %d", c, r, i, arg[r*c.cols+i], wa[i])
					}
				}
			}
		}
	})
}
