package tensor

import (
	"fmt"
	"github.com/cohortml/cohort/tensor/tensortest"
	"math"
	"testing"
)

func TestSumMeanDim(t *testing.T) {
	rng := newRNG(3)
	for _, shape := range [][]int{{4, 6}, {2, 3, 4}, {5}, {3, 0}} {
		for lay, x := range layouts(rng, shape) {
			for dim := -1; dim < len(shape); dim++ {
				for _, keep := range []bool{false, true} {
					t.Run(fmt.Sprintf("%v/%s/dim%d/keep=%v", shape, lay, dim, keep), func(t *testing.T) {
						d := dim
						if d < 0 {
							d += len(shape)
						}
						outShape := keptShape(shape, d)
						want := make([]float64, New(outShape...).Len())
						ost := contiguousStrides(outShape)
						tensortest.ForEachIndex(shape, func(idx []int) {
							p := 0
							for i, v := range idx {
								if i != d {
									p += v * ost[i]
								}
							}
							want[p] += float64(x.At(idx...))
						})
						s, m := SumDim(x, dim, keep), MeanDim(x, dim, keep)
						wantShape := outShape
						if !keep {
							wantShape = dropDim(shape, d)
						}
						if !s.SameShape(New(wantShape...)) || !m.SameShape(s) {
							t.Fatalf("shapes %v %v, want %v", s.Shape(), m.Shape(), wantShape)
						}
						ws, wm := make([]float32, len(want)), make([]float32, len(want))
						for i, v := range want {
							ws[i], wm[i] = float32(v), float32(v/float64(shape[d]))
						}
						assertClose(t, "sum", s.Data(), ws, 1e-6)
						if shape[d] > 0 {
							assertClose(t, "mean", m.Data(), wm, 1e-6)
						}
					})
				}
			}
		}
	}
}

func TestSumAllMeanMax(t *testing.T) {
	x := arange(3, 4).T() // 0..11 transposed
	if got := Sum(x).Item(); got != 66 {
		t.Errorf("Sum = %g, want 66", got)
	}
	if got := Mean(x).Item(); got != 5.5 {
		t.Errorf("Mean = %g, want 5.5", got)
	}
	if got := Max(x).Item(); got != 11 {
		t.Errorf("Max = %g, want 11", got)
	}
	v, idx := MaxDim(x, 1, false) // over the rows of x = columns of base
	assertClose(t, "maxdim", v.Data(), []float32{8, 9, 10, 11}, 0)
	for i, j := range idx {
		if j != 2 {
			t.Errorf("argmax[%d] = %d, want 2", i, j)
		}
	}
	if got := ArgMax(FromSlice([]float32{1, 5, 5, 0, -1, -2}, 2, 3)); got[0] != 1 || got[1] != 0 {
		t.Errorf("ArgMax = %v, want [1 0] (first maximum on ties)", got)
	}
	if got := Max(FromSlice([]float32{1, float32(math.NaN()), 3}, 3)).Item(); !math.IsNaN(float64(got)) {
		t.Errorf("Max with NaN = %g, want NaN", got)
	}
}

func TestSumToUndoesBroadcast(t *testing.T) {
	g := arange(2, 3, 4)
	got := SumTo(g, 3, 1)
	want := make([]float32, 3)
	tensortest.ForEachIndex([]int{2, 3, 4}, func(i []int) { want[i[1]] += g.At(i...) })
	assertClose(t, "SumTo", got.Data(), want, 0)
	mustPanic(t, func() { SumTo(g, 2, 1, 3) }, "SumInto", "[2 1 3]", "[2 3 4]")
}

// TestSumIntoBias checks the bias-gradient case (a contiguous [n] or
// [1, n] over the rows of a contiguous [..., n], which SumInto hands to
// vec.SumRows) bit for bit against adding the rows in order, onto what dst
// held, and a strided source against the same sums.
func TestSumIntoBias(t *testing.T) {
	rng := newRNG(9)
	for _, shape := range [][]int{{1, 5}, {3, 1}, {7, 9}, {2, 33, 70}, {300, 128}} {
		src := New(shape...)
		src.FillNormal(rng, 0, 1)
		n := shape[len(shape)-1]
		for _, dshape := range [][]int{{n}, {1, n}} {
			dst := New(dshape...)
			dst.FillNormal(rng, 0, 1)
			want := append([]float32(nil), dst.Data()...)
			sd := src.Data()
			for r := 0; r < len(sd)/n; r++ {
				for j := range n {
					want[j] += sd[r*n+j]
				}
			}
			SumInto(dst, src)
			for j, v := range dst.Data() {
				if math.Float32bits(v) != math.Float32bits(want[j]) {
					t.Fatalf("%v into %v: [%d] = %v, want %v", shape, dshape, j, v, want[j])
				}
			}
		}
	}
	// A transposed (strided) source takes the general path: same sums.
	src := New(6, 4)
	src.FillNormal(rng, 0, 1)
	got := SumInto(New(6), src.T())
	want := SumInto(New(6), src.T().Contiguous())
	assertClose(t, "strided", got.Data(), want.Data(), 1e-6)
}
