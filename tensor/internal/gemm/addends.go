package gemm

import (
	"fmt"

	"github.com/cohortml/cohort/tensor/internal/vec"
)

// Addends are what [SgemmFused] adds to a product's result: C[i][j] +=
// Row[j] when Row is not nil, then C[i][j] += Mat[i·LdMat + j] when Mat is
// not nil, each a float32 addition made after alpha and beta, in that
// order (a linear layer's bias, then its residual, rounded as the
// separate passes over C they replace). The AVX-512 6×64 kernel that reads
// A in place adds them to each tile before storing it, so C is written
// once; elsewhere they are added to each block of C as it is finished,
// while it is in cache.
type Addends struct {
	Row   []float32 // at least n values, or nil
	Mat   []float32 // an m×n matrix with row stride LdMat, or nil
	LdMat int
}

// check panics, with a message starting "gemm:", unless ad fits an m×n C.
func (ad *Addends) check(m, n int) {
	if ad.Row != nil && len(ad.Row) < n {
		panic(fmt.Sprintf("gemm: an addend row of %d values for %d columns", len(ad.Row), n))
	}
	if ad.Mat != nil && (ad.LdMat < n || len(ad.Mat) < (m-1)*ad.LdMat+n) {
		panic(fmt.Sprintf("gemm: an addend matrix of %d values with row stride %d for %d×%d", len(ad.Mat), ad.LdMat, m, n))
	}
}

// checked panics unless ad (nil or not) fits an m×n C, and returns ad, or
// nil when it adds nothing.
func (ad *Addends) checked(m, n int) *Addends {
	if ad != nil {
		ad.check(m, n)
		if ad.Row == nil && ad.Mat == nil {
			return nil
		}
	}
	return ad
}

// sub returns the addends of the part of C whose first element is C[i][j].
func (ad *Addends) sub(i, j int) *Addends {
	if ad == nil {
		return nil
	}
	s := &Addends{LdMat: ad.LdMat}
	if ad.Row != nil {
		s.Row = ad.Row[j:]
	}
	if ad.Mat != nil {
		s.Mat = ad.Mat[i*ad.LdMat+j:]
	}
	return s
}

// apply adds the addends to the rows×cols block of C (row stride ldc)
// whose first element is C[i][j].
func (ad *Addends) apply(c []float32, ldc, i, j, rows, cols int) {
	for r := i; r < i+rows; r++ {
		row := c[r*ldc+j : r*ldc+j+cols]
		if ad.Row != nil {
			vec.Add(row, ad.Row[j:j+cols])
		}
		if ad.Mat != nil {
			vec.Add(row, ad.Mat[r*ad.LdMat+j:r*ad.LdMat+j+cols])
		}
	}
}

// ptrs returns the addends of the tile whose first element is C[i][j], as
// the kernel takes them (nil when absent).
func (ad *Addends) ptrs(i, j int) (row, mat *float32) {
	if ad.Row != nil {
		row = &ad.Row[j]
	}
	if ad.Mat != nil {
		mat = &ad.Mat[i*ad.LdMat+j]
	}
	return row, mat
}
