package gemm_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	. "github.com/cohortml/cohort/tensor/internal/gemm"
	"github.com/cohortml/cohort/tensor/internal/gemm/gemmtest"
)

// TestAMXPath runs the bfloat16 conformance suite on the AMX path with
// the Go model of its tile kernel: the packers, the k padding, the
// blocking, the split over threads and the alpha/beta epilogue, on any
// CPU. (The tile kernel itself is checked by TestAMXKernel where AMX
// exists.)
func TestAMXPath(t *testing.T) {
	for _, threads := range []int{1, 2} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			runBF16Split(t, NewAMXModel(threads), KernelAMX)
		})
	}
}

// TestAMXPathLarge: products past the AMX path's blocking sizes (several
// k slabs of 512 pairs, A blocks of 256 rows, edges in every dimension).
func TestAMXPathLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large products")
	}
	g := NewAMXModel(2)
	for _, c := range []gemmtest.Case{
		{M: 300, N: 70, K: 1100, Alpha: 1, Beta: 0.5, PadA: 1},
		{TransA: true, TransB: true, M: 33, N: 65, K: 31, Alpha: -1},
		{TransB: true, M: 64, N: 96, K: 128, Alpha: 1, Beta: 1},
	} {
		t.Run(c.String(), func(t *testing.T) {
			gemmtest.CheckBF16(t, g.GemmBF16, c, rand.New(rand.NewPCG(5, 6)))
		})
	}
}

// TestAMXKernel runs the conformance suite on the assembly tile kernel
// where the CPU and OS allow AMX; elsewhere it says why it did not run.
func TestAMXKernel(t *testing.T) {
	if err := AMXSupport(); err != nil {
		t.Skipf("AMX kernel not executed: %v", err)
	}
	g := MustNew(t, Options{BLAS: BLASGo, Kernel: KernelAMX, Threads: 2})
	AlwaysSplit(g)
	gemmtest.RunBF16(t, g.GemmBF16)
}

// TestAMXUnavailable: forcing the amx kernel on a CPU without it fails
// with one error naming the missing feature, and auto does not pick it.
func TestAMXUnavailable(t *testing.T) {
	err := AMXSupport()
	if err == nil {
		t.Skip("this CPU runs the AMX kernel")
	}
	_, nerr := New(Options{BLAS: BLASGo, Kernel: KernelAMX})
	if nerr == nil || !strings.Contains(nerr.Error(), "kernel amx requested") || !strings.Contains(nerr.Error(), err.Error()) {
		t.Fatalf("New(amx) = %v, want an error naming %q", nerr, err)
	}
	if !strings.Contains(err.Error(), "AMX") {
		t.Errorf("error %q does not name the AMX feature", err)
	}
	t.Logf("New(amx): %v", nerr)
	env := map[string]string{EnvKernel: "amx"}
	o, err := OptionsFromEnv(func(k string) string { return env[k] })
	if err != nil || o.Kernel != KernelAMX {
		t.Fatalf("OptionsFromEnv(%s=amx) = %+v, %v", EnvKernel, o, err)
	}
	g := MustNew(t, Options{BLAS: BLASGo})
	if g.BF16Kernel() == KernelAMX {
		t.Errorf("auto picked %s on a CPU without it", KernelAMX)
	}
}

// TestAMXSelfCheck: the check passes the model and refuses a kernel that
// loses one pair of k.
func TestAMXSelfCheck(t *testing.T) {
	if err := AMXSelfCheckModel(false); err != nil {
		t.Fatal(err)
	}
	if err := AMXSelfCheckModel(true); err == nil || !strings.Contains(err.Error(), "self-check failed") {
		t.Fatalf("broken kernel: %v, want a failed self-check", err)
	}
}

// TestAMXTileConfig: palette 1, tiles 0-7 of 16 rows × 64 bytes, the
// rest zero (reserved bytes must be zero or LDTILECFG faults).
func TestAMXTileConfig(t *testing.T) {
	var want [64]byte
	want[0] = 1
	for i := 0; i < 8; i++ {
		want[16+2*i], want[48+i] = 64, 16
	}
	if got := AMXTileConfig(); got != want {
		t.Errorf("tile config % x, want % x", got, want)
	}
}

// TestAMXPathMixed: GemmMixed on the AMX path (the Go model of its tile
// kernel) with float32 operands, which it rounds whole before the tiles
// read them, and its addends and epilogue applied after the product.
func TestAMXPathMixed(t *testing.T) {
	g := NewAMXModel(2)
	AlwaysSplit(g)
	gemmtest.RunBF16(t, func(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
		fa := make([]float32, len(a))
		for i, v := range a {
			fa[i] = F32(v)
		}
		g.GemmMixed(transA, transB, m, n, k, alpha, F32Operand(fa), lda, BF16Operand(b), ldb, beta, c, ldc, nil, nil)
	})
	m, n, k := 40, 50, 70
	a, b := make([]uint16, m*k), make([]uint16, k*n)
	for i := range a {
		a[i] = BF16(float32(i%7) - 3)
	}
	for i := range b {
		b[i] = BF16(float32(i%5) - 2)
	}
	row := make([]float32, n)
	for i := range row {
		row[i] = float32(i)
	}
	got, want := make([]float32, m*n), make([]float32, m*n)
	g.GemmMixed(false, false, m, n, k, 1, BF16Operand(a), k, BF16Operand(b), n, 0, got, n, &Addends{Row: row}, func(i0, i1, j0, j1 int) {
		for i := i0; i < i1; i++ {
			for j := j0; j < j1; j++ {
				got[i*n+j] = -got[i*n+j]
			}
		}
	})
	g.GemmBF16(false, false, m, n, k, 1, a, k, b, n, 0, want, n)
	for i := range want {
		if w := -(want[i] + row[i%n]); got[i] != w {
			t.Fatalf("C[%d] = %v, want %v", i, got[i], w)
		}
	}
}
