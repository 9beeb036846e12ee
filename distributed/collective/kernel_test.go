package collective

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestSumVectorMatchesScalar: the vector sums are bit-identical to the Go
// loop for every length around the unrolling boundaries, including NaNs,
// infinities and signed zeros, and leave the rest of dst alone.
func TestSumVectorMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	special := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1e-310, 3.5}
	for n := range 70 {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			a32, b32 := make([]float32, n), make([]float32, n)
			a64, b64 := make([]float64, n), make([]float64, n)
			ai, bi := make([]int64, n), make([]int64, n)
			for i := range n {
				x, y := rng.NormFloat64()*1e3, rng.NormFloat64()
				if rng.IntN(5) == 0 {
					x = special[rng.IntN(len(special))]
				}
				a32[i], b32[i], a64[i], b64[i] = float32(x), float32(y), x, y
				ai[i], bi[i] = rng.Int64(), rng.Int64()
			}
			check(t, a32, b32)
			check(t, a64, b64)
			check(t, ai, bi)
		})
	}
}

// TestAvgVectorMatchesScalar: Avg's vector division is bit-identical to
// the Go loop's for every length around the unrolling boundaries, special
// values included, and leaves the rest of dst alone.
func TestAvgVectorMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), 1e-40, 3.5}
	for _, world := range []int{1, 2, 3, 7} {
		for n := range 70 {
			x := make([]float32, n+1)
			for i := range n {
				x[i] = float32(rng.NormFloat64() * 1e3)
				if rng.IntN(5) == 0 {
					x[i] = special[rng.IntN(len(special))]
				}
			}
			x[n] = 42
			want := make([]float32, n)
			for i := range want {
				want[i] = x[i] / float32(world)
			}
			scaleBytes(Float32, byteView(x[:n]), world)
			for i := range want {
				if math.Float32bits(x[i]) != math.Float32bits(want[i]) && !(want[i] != want[i] && x[i] != x[i]) {
					t.Fatalf("world %d n=%d element %d: %v, want %v", world, n, i, x[i], want[i])
				}
			}
			if x[n] != 42 {
				t.Fatalf("world %d n=%d: wrote past the end", world, n)
			}
		}
	}
}

func check[T number](t *testing.T, a, b []T) {
	t.Helper()
	n := len(a)
	got, want := make([]T, n+1), make([]T, n)
	got[n] = 42
	sumInto(got[:n], a, b)
	sumScalar(want, a, b)
	for i := range want {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Fatalf("%T element %d: %v, want %v", a, i, got[i], want[i])
		}
	}
	if got[n] != 42 {
		t.Fatalf("%T: wrote past the end", a)
	}
}

func BenchmarkSum(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10, 2 << 20} {
		x, y := make([]float32, n), make([]float32, n)
		for _, k := range []struct {
			name string
			sum  func(dst, a, b []float32)
		}{{"vector", sumInto[float32]}, {"scalar", sumScalar[float32]}} {
			b.Run(fmt.Sprintf("f32/n=%d/%s", n, k.name), func(b *testing.B) {
				b.SetBytes(int64(4 * n))
				for b.Loop() {
					k.sum(x, x, y)
				}
			})
		}
	}
}

func byteView(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}
