package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// paths runs f once per implementation this machine has, named.
func paths(t *testing.T, f func(t *testing.T)) { implPaths(t, &useAVX2, "avx2", f) }

// implPaths runs f as subtest or sub-benchmark "go" with *use off, then,
// where *use was set (the CPU has the instructions), as asm with it on,
// and restores *use.
func implPaths[R interface{ Run(string, func(R)) bool }](r R, use *bool, asm string, f func(R)) {
	has := *use
	defer func() { *use = has }()
	*use = false
	r.Run("go", f)
	if has {
		*use = true
		r.Run(asm, f)
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

// TestSumRows checks SumRows bit for bit against adding the rows one at a
// time, in order, over widths around its 64- and 8-column strips and
// heights around its 32-row blocks.
func TestSumRows(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, cols := range []int{0, 1, 7, 8, 9, 63, 64, 65, 128, 200, 512} {
			for _, rows := range []int{0, 1, 2, 31, 32, 33, 100} {
				stride := cols + 5
				src := randVals(rng, rows*stride+cols)
				dst := randVals(rng, cols+3)
				want := append([]float32(nil), dst...)
				for r := 0; r < rows; r++ {
					for j := 0; j < cols; j++ {
						want[j] += src[r*stride+j]
					}
				}
				SumRows(dst[:cols], src, stride, rows)
				checkSame(t, fmt.Sprintf("rows=%d cols=%d", rows, cols), dst, want) // the 3 past cols untouched
			}
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

func TestMaxPool2Plane(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 12))
		for _, cols := range lengths {
			for _, c := range []struct {
				bias          float32
				useBias, relu bool
			}{{0, false, false}, {0.5, true, true}, {0, true, true}, {-0.3, true, false}, {0, false, true}} {
				rows := 1 + rng.IntN(4)
				stride, w := 2*cols+rng.IntN(3), 2*cols+rng.IntN(3)
				src := randVals(rng, 2*rows*stride)
				n := rows * cols
				dst, arg := make([]float32, n+1), make([]int32, n+1)
				dst[n], arg[n] = 7, 7
				MaxPool2Plane(dst, arg, src, rows, cols, stride, c.bias, c.useBias, c.relu, w)
				name := fmt.Sprintf("%dx%d stride %d w %d %+v", rows, cols, stride, w, c)
				if dst[n] != 7 || arg[n] != 7 {
					t.Fatalf("%s: wrote past the plane", name)
				}
				for r := 0; r < rows; r++ {
					wd, wa := naivePool(cols, src[2*r*stride:], src[(2*r+1)*stride:], c.bias, c.useBias, c.relu, 2*r*w, w)
					checkSame(t, fmt.Sprintf("%s row %d", name, r), dst[r*cols:][:cols], wd)
					for i := range wa {
						if arg[r*cols+i] != wa[i] {
							t.Fatalf("%s: arg[%d][%d] = %d, want %d", name, r, i, arg[r*cols+i], wa[i])
						}
					}
				}
			}
		}
	})
	mustPanicVec(t, func() {
		MaxPool2Plane(make([]float32, 4), make([]int32, 4), make([]float32, 64), 1, 4, 7, 0, false, false, 8)
	}, "row stride 7")
}

func mustPanicVec(t *testing.T, f func(), frag string) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if msg, _ := r.(string); r == nil || !strings.Contains(msg, frag) {
			t.Fatalf("panic %v, want one mentioning %q", r, frag)
		}
	}()
	f()
}
