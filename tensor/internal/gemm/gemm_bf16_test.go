package gemm_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	. "github.com/cohortml/cohort/tensor/internal/gemm"
	"github.com/cohortml/cohort/tensor/internal/gemm/gemmtest"
)

// bf16Kernels returns the kernels whose GemmBF16 paths this CPU can run:
// each of Kernels (widening to float32) and avx512bf16 when present.
func bf16Kernels() []string {
	ks := Kernels()
	if HasAVX512BF16() {
		ks = append(ks, KernelAVX512BF16)
	}
	return ks
}

// TestGemmBF16 runs the bfloat16 conformance suite (gemmtest.RunBF16) on
// every path, with 1 and 2 threads, each product split whenever its
// partition allows.
func TestGemmBF16(t *testing.T) {
	for _, kern := range bf16Kernels() {
		for _, threads := range []int{1, 2} {
			t.Run(fmt.Sprintf("kernel=%s/threads=%d", kern, threads), func(t *testing.T) {
				g, err := New(Options{BLAS: BLASGo, Kernel: kern, Threads: threads})
				if err != nil {
					t.Fatal(err)
				}
				want := "widen/" + kern
				if kern == KernelAVX512BF16 {
					want = kern
				}
				if g.BF16Kernel() != want {
					t.Fatalf("BF16Kernel() = %q, want %q", g.BF16Kernel(), want)
				}
				AlwaysSplit(g)
				gemmtest.RunBF16(t, g.GemmBF16)
			})
		}
	}
}

// TestGemmBF16Large checks products past every blocking size of the
// VDPBF16PS path (two B panels, several k slabs, several A blocks).
func TestGemmBF16Large(t *testing.T) {
	if testing.Short() {
		t.Skip("large products")
	}
	for _, kern := range bf16Kernels() {
		g, err := New(Options{BLAS: BLASGo, Kernel: kern, Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []gemmtest.Case{
			{M: 700, N: 130, K: 777, Alpha: 1, Beta: 0.5, PadA: 1},
			{TransA: true, TransB: true, M: 90, N: 4150, K: 9, Alpha: -1},
			{TransB: true, M: 64, N: 384, K: 128, Alpha: 1, Beta: 1},
		} {
			t.Run(fmt.Sprintf("kernel=%s/%v", kern, c), func(t *testing.T) {
				gemmtest.CheckBF16(t, g.GemmBF16, c, rand.New(rand.NewPCG(5, 6)))
			})
		}
	}
}

func TestGemmBF16Env(t *testing.T) {
	env := map[string]string{EnvKernel: "AVX512BF16"}
	o, err := OptionsFromEnv(func(k string) string { return env[k] })
	if err != nil || o.Kernel != KernelAVX512BF16 {
		t.Fatalf("OptionsFromEnv(%s=AVX512BF16) = %+v, %v", EnvKernel, o, err)
	}
	_, err = New(o)
	if HasAVX512BF16() != (err == nil) {
		t.Fatalf("New(avx512bf16) on a CPU with AVX512-BF16 %v: %v", HasAVX512BF16(), err)
	}
}
