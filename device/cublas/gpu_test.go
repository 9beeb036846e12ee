package cublas_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/device/cublas"
	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/cuda/cudatest"
	"github.com/cohortml/cohort/tensor/tensortest"
)

// The tests named GPU need a device; they skip with the reason elsewhere.

// openGPU opens cuda:0 and a cuBLAS handle on it with the default
// options (TF32 off), destroyed when t ends.
func openGPU(t *testing.T) (*cuda.Context, *cublas.Handle) {
	t.Helper()
	c, l := cudatest.Open(t), load(t)
	h, err := l.Create(c, cublas.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Destroy() })
	return c, h
}

// ref computes row-major C = alpha·op(A)·op(B) + beta·C in float64.
func ref(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				av := a[i*lda+p]
				if transA {
					av = a[p*lda+i]
				}
				bv := b[p*ldb+j]
				if transB {
					bv = b[j*ldb+p]
				}
				s += float64(av) * float64(bv)
			}
			out[i*n+j] = float64(alpha)*s + float64(beta)*float64(c[i*ldc+j])
		}
	}
	return out
}

func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return math.Sqrt(num / den)
}

func TestGPUSgemm(t *testing.T) {
	c, h := openGPU(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct {
		m, n, k        int
		transA, transB bool
	}{{1, 1, 1, false, false}, {7, 5, 3, false, false}, {64, 48, 33, true, false}, {129, 65, 257, false, true}, {256, 256, 256, true, true}, {1000, 3, 1000, false, false}} {
		t.Run(fmt.Sprintf("m=%d/n=%d/k=%d/tA=%v/tB=%v", s.m, s.n, s.k, s.transA, s.transB), func(t *testing.T) {
			lda, ldb := s.k, s.n
			if s.transA {
				lda = s.m
			}
			if s.transB {
				ldb = s.k
			}
			a, b, cc := tensortest.Randn(rng, s.m*s.k), tensortest.Randn(rng, s.k*s.n), tensortest.Randn(rng, s.m*s.n)
			want := ref(s.transA, s.transB, s.m, s.n, s.k, 1.5, a, lda, b, ldb, 0.5, cc, s.n)
			da, db, dc := cudatest.Upload(t, c, a), cudatest.Upload(t, c, b), cudatest.Upload(t, c, cc)
			if err := h.Sgemm(cublas.Gemm{TransA: s.transA, TransB: s.transB, M: s.m, N: s.n, K: s.k, Alpha: 1.5, Beta: 0.5,
				A: da, LDA: lda, B: db, LDB: ldb, C: dc, LDC: s.n}); err != nil {
				t.Fatal(err)
			}
			if e := relErr(cudatest.Download[float32](t, c, dc, s.m*s.n), want); e > 1e-5 {
				t.Errorf("‖gpu − ref‖/‖ref‖ = %.3g, want ≤ 1e-5 (fp32, TF32 off)", e)
			}
		})
	}
}

func TestGPUSgemmStridedBatched(t *testing.T) {
	c, h := openGPU(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const batch, m, n, k = 5, 33, 17, 65
	a, b := tensortest.Randn(rng, batch*m*k), tensortest.Randn(rng, batch*k*n)
	cc := make([]float32, batch*m*n)
	da, db, dc := cudatest.Upload(t, c, a), cudatest.Upload(t, c, b), cudatest.Upload(t, c, cc)
	if err := h.Sgemm(cublas.Gemm{M: m, N: n, K: k, Alpha: 1, A: da, LDA: k, B: db, LDB: n, C: dc, LDC: n,
		StrideA: m * k, StrideB: k * n, StrideC: m * n, Batch: batch}); err != nil {
		t.Fatal(err)
	}
	got := cudatest.Download[float32](t, c, dc, batch*m*n)
	for i := range batch {
		want := ref(false, false, m, n, k, 1, a[i*m*k:], k, b[i*k*n:], n, 0, cc[i*m*n:], n)
		if e := relErr(got[i*m*n:(i+1)*m*n], want); e > 1e-5 {
			t.Errorf("batch %d: relative error %.3g", i, e)
		}
	}
}

// bf16 rounds to nearest even, as PyTorch's conversion.
func bf16(x float32) uint16 {
	b := math.Float32bits(x)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

func TestGPUGemmExBF16(t *testing.T) {
	c, h := openGPU(t)
	rng := rand.New(rand.NewPCG(5, 6))
	const m, n, k = 128, 96, 512
	a, b := tensortest.Randn(rng, m*k), tensortest.Randn(rng, k*n)
	// The reference uses the bf16-rounded inputs: what remains is the
	// accumulation error, fp32 over k = 512 terms.
	ah, bh := make([]uint16, m*k), make([]uint16, k*n)
	for i := range a {
		ah[i] = bf16(a[i])
		a[i] = math.Float32frombits(uint32(ah[i]) << 16)
	}
	for i := range b {
		bh[i] = bf16(b[i])
		b[i] = math.Float32frombits(uint32(bh[i]) << 16)
	}
	want := ref(false, false, m, n, k, 1, a, k, b, n, 0, make([]float32, m*n), n)
	da, db, dc := cudatest.Upload(t, c, ah), cudatest.Upload(t, c, bh), cudatest.Alloc(t, c, 4*m*n)
	if err := h.GemmEx(cublas.Gemm{M: m, N: n, K: k, Alpha: 1, A: da, LDA: k, AType: cublas.BF16, B: db, LDB: n, BType: cublas.BF16,
		C: dc, LDC: n, CType: cublas.F32}); err != nil {
		t.Fatal(err)
	}
	if e := relErr(cudatest.Download[float32](t, c, dc, m*n), want); e > 1e-5 {
		t.Errorf("bf16 inputs, fp32 accumulation: relative error %.3g, want ≤ 1e-5 against the rounded inputs", e)
	}
}

// TestGPUTF32 checks that TF32 is off by default and takes effect when
// asked: with it, an fp32 product of k = 4096 loses about three decimal
// digits against the float64 reference; without it, it keeps fp32's.
func TestGPUTF32(t *testing.T) {
	c, h := openGPU(t)
	rng := rand.New(rand.NewPCG(7, 8))
	const m, n, k = 64, 64, 4096
	a, b := tensortest.Randn(rng, m*k), tensortest.Randn(rng, k*n)
	want := ref(false, false, m, n, k, 1, a, k, b, n, 0, make([]float32, m*n), n)
	da, db, dc := cudatest.Upload(t, c, a), cudatest.Upload(t, c, b), cudatest.Upload(t, c, make([]float32, m*n))
	errs := map[bool]float64{}
	for _, on := range []bool{false, true} {
		if err := h.SetTF32(on); err != nil {
			t.Fatal(err)
		}
		if err := h.Sgemm(cublas.Gemm{M: m, N: n, K: k, Alpha: 1, A: da, LDA: k, B: db, LDB: n, C: dc, LDC: n}); err != nil {
			t.Fatal(err)
		}
		errs[on] = relErr(cudatest.Download[float32](t, c, dc, m*n), want)
	}
	t.Logf("relative error: fp32 %.3g, TF32 %.3g", errs[false], errs[true])
	if errs[false] > 1e-5 || errs[true] < 10*errs[false] {
		t.Errorf("fp32 %.3g (want ≤ 1e-5), TF32 %.3g (want ≫ fp32's)", errs[false], errs[true])
	}
}
