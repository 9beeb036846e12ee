package tensor

import (
	"fmt"
	"github.com/cohortml/cohort/tensor/tensortest"
	"testing"
)

func naiveMatMul(a, b *Tensor) []float32 {
	batch, m, k, n := matmulShape("test", a, b)
	var out []float32
	tensortest.ForEachIndex(append(append([]int(nil), batch...), m, n), func(idx []int) {
		nb := len(batch)
		ai := bcIdx(idx[:nb], a.Shape()[:len(a.Shape())-2])
		bi := bcIdx(idx[:nb], b.Shape()[:len(b.Shape())-2])
		var acc float64
		for p := 0; p < k; p++ {
			acc += float64(a.At(append(append([]int(nil), ai...), idx[nb], p)...)) *
				float64(b.At(append(append([]int(nil), bi...), p, idx[nb+1])...))
		}
		out = append(out, float32(acc))
	})
	return out
}

func TestMatMul(t *testing.T) {
	rng := newRNG(4)
	cases := [][2][]int{
		{{3, 4}, {4, 5}},
		{{1, 33}, {33, 2}},
		{{7, 1}, {1, 3}},
		{{2, 3, 4}, {2, 4, 5}},
		{{2, 3, 4}, {4, 5}},
		{{3, 4}, {2, 4, 5}},
		{{2, 1, 3, 4}, {1, 3, 4, 2}},
		{{0, 4}, {4, 3}},
		{{3, 0}, {0, 2}},
	}
	for _, sh := range cases {
		for la, a := range layouts(rng, sh[0]) {
			for lb, b := range layouts(rng, sh[1]) {
				t.Run(fmt.Sprintf("%v_%s@%v_%s", sh[0], la, sh[1], lb), func(t *testing.T) {
					assertClose(t, "matmul", MatMul(a, b).Data(), naiveMatMul(a, b), 1e-5)
				})
			}
		}
	}
}

func TestGemmAccumulates(t *testing.T) {
	rng := newRNG(5)
	a, b := randT(rng, 3, 4), randT(rng, 5, 4)
	c := randT(rng, 3, 5)
	before := c.Clone()
	Gemm(c, a, b.T(), 2, 1) // c = 2·a@bᵀ + c
	want := naiveMatMul(a, b.T())
	for i := range want {
		want[i] = 2*want[i] + before.Data()[i]
	}
	assertClose(t, "gemm", c.Data(), want, 1e-5)
}

func TestMatMulPanics(t *testing.T) {
	mustPanic(t, func() { MatMul(New(2, 3), New(4, 5)) }, "tensor: MatMul", "[2 3]", "[4 5]")
	mustPanic(t, func() { MatMul(New(3), New(3, 2)) }, "MatMul", "[3]")
	mustPanic(t, func() { MatMul(New(2, 2, 3), New(3, 3, 2)) }, "MatMul", "batch", "[2 2 3]", "[3 3 2]")
	mustPanic(t, func() { MatMulInto(New(2, 3), New(2, 3), New(3, 2)) }, "Gemm", "destination", "[2 3]")
}
