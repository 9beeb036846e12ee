package gemm

import (
	"fmt"
	"sync"

	"github.com/cohortml/cohort/tensor/internal/blas"
)

// Impl is one configured sgemm: a backend, a kernel and a thread count,
// fixed at construction. It is safe for concurrent use; calls writing
// disjoint parts of C may overlap.
type Impl struct {
	arch    *arch      // cohort's kernel family; nil when lib is set
	bf16    *bf16Arch  // the bfloat16 kernel family; nil: GemmBF16 widens to float32
	cvt     int        // bfloat16 conversion path (cvtGo, ...)
	wide    *arch      // optional second family for short, wide products
	dot     dotKernel  // optional dot-product kernel for A·Bᵀ with long k
	rowA    rowAKernel // optional 6×64 kernel reading A in place, for A·Bᵀ with few rows
	anyRowA bool       // tests: take the row-A path for any m ≤ 64, not only m ≥ rowAMinM
	// triangularInPlace: SgemmTriangular reads operands in place where the
	// kernel family allows (tests and benchmarks turn it off to compare).
	triangularInPlace bool
	// narrowLower: SgemmLowerNT runs each block of rows on the row-A
	// kernel only as wide as its columns up to the diagonal (tests and
	// benchmarks turn it off to compare).
	narrowLower bool
	lib         *blas.OpenBLAS // OpenBLAS; nil for cohort's kernels
	threads     int
	bufs        sync.Pool // *packBuf, one per running goroutine
	pool        pool      // helper goroutines of parallel calls
	coldMin     int       // coldMinFlops; 0 in tests that want every split
}

// New builds an Impl from o. It fails on invalid options, on a kernel the
// CPU lacks, and when BLAS is "openblas" and the library cannot be loaded.
func New(o Options) (*Impl, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	g := &Impl{threads: o.threads(), coldMin: coldMinFlops, triangularInPlace: true}
	g.bufs.New = func() any { return new(packBuf) }

	kernel := o.Kernel
	explicit := kernel != "" && kernel != KernelAuto
	switch kernel {
	case "", KernelAuto:
		switch {
		case hasAVX512() && amxSupport() == nil:
			kernel = KernelAMX
		case hasAVX512BF16():
			kernel = KernelAVX512BF16
		case hasAVX512():
			kernel = KernelAVX512
		case hasAVX2():
			kernel = KernelAVX2
		default:
			kernel = KernelGo
		}
	case KernelAMX:
		if err := amxSupport(); err != nil {
			return nil, fmt.Errorf("gemm: kernel %s requested: %w", kernel, err)
		}
		if !hasAVX512() {
			return nil, fmt.Errorf("gemm: kernel %s requested but the CPU lacks AVX-512F", kernel)
		}
	case KernelAVX512BF16:
		if !hasAVX512BF16() {
			return nil, fmt.Errorf("gemm: kernel %s requested but the CPU lacks AVX512-BF16", kernel)
		}
	case KernelAVX512:
		if !hasAVX512() {
			return nil, fmt.Errorf("gemm: kernel %s requested but the CPU lacks AVX-512F", kernel)
		}
	case KernelAVX2:
		if !hasAVX2() {
			return nil, fmt.Errorf("gemm: kernel %s requested but the CPU lacks AVX2 and FMA", kernel)
		}
	}

	lib := o.OpenBLASLib
	if lib == "" {
		lib = DefaultOpenBLASLib
	}
	switch o.BLAS {
	case BLASOpenBLAS:
		if explicit {
			return nil, fmt.Errorf("gemm: BLAS %s and kernel %s contradict: the kernel applies to BLAS %s only", BLASOpenBLAS, kernel, BLASGo)
		}
		l, err := blas.Load(lib)
		if err != nil {
			return nil, fmt.Errorf("gemm: BLAS %s requested: %w", BLASOpenBLAS, err)
		}
		g.lib = l
	case "", BLASAuto:
		if !explicit && kernel == KernelGo {
			if l, err := blas.Load(lib); err == nil {
				g.lib = l
			}
		}
	}
	if g.lib != nil {
		g.lib.SetThreads(g.threads)
		return g, nil
	}
	switch kernel {
	case KernelAMX, KernelAVX512BF16, KernelAVX512:
		g.arch = avx512Arch()
		g.cvt = cvtAVX512
		if kernel != KernelAVX512 && hasAVX512BF16() {
			g.cvt = cvtAVX512BF16
		}
		switch kernel {
		case KernelAVX512BF16:
			g.bf16 = bf16AVX512Arch()
		case KernelAMX:
			g.bf16 = bf16AMXArch()
		}
		g.wide = avx512WideArch()
		g.dot = dotAVX512x4x6
		g.rowA = kernelAVX512x6x64r
		g.narrowLower = true
	case KernelAVX2:
		g.arch = avx2Arch()
		g.cvt = cvtAVX2
	default:
		g.arch = goArch()
	}
	return g, nil
}

// Backend returns "go" for cohort's kernels or "openblas".
func (g *Impl) Backend() string {
	if g.lib != nil {
		return BLASOpenBLAS
	}
	return BLASGo
}

// Kernel returns cohort's kernel name ("avx512", "avx2", "go"), or "" when
// the backend is OpenBLAS.
func (g *Impl) Kernel() string {
	if g.arch == nil {
		return ""
	}
	return g.arch.name
}

// Threads returns the number of threads one call may use.
func (g *Impl) Threads() int { return g.threads }

// Parallel runs do(0), …, do(parts−1) on the caller and up to Threads−1
// of the Impl's helper goroutines (those its products use), returning when
// all have returned; parts must be independent. With one thread, or one
// part, it runs them in order on the caller. It lets work between products
// (a transformer's attention heads, its elementwise passes) use the
// threads the products do.
func (g *Impl) Parallel(parts int, do func(part int)) {
	if g.threads <= 1 || parts <= 1 {
		for p := range parts {
			do(p)
		}
		return
	}
	g.pool.parallel(g.threads-1, parts, do)
}

// String describes the implementation, e.g. "cohort avx512 14×32, 1 thread".
func (g *Impl) String() string {
	th := fmt.Sprintf("%d threads", g.threads)
	if g.threads == 1 {
		th = "1 thread"
	}
	if g.lib != nil {
		cfg := g.lib.Config()
		if cfg == "" {
			cfg = "version unknown"
		}
		return fmt.Sprintf("openblas %s (%s), %s", g.lib.Name(), cfg, th)
	}
	tiles := fmt.Sprintf("%d×%d", g.arch.mr, g.arch.nr)
	if g.wide != nil {
		tiles += fmt.Sprintf("+%d×%d", g.wide.mr, g.wide.nr)
	}
	return fmt.Sprintf("cohort %s %s, %s", g.arch.name, tiles, th)
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C with the contract of the
// package-level [Sgemm].
func (g *Impl) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	g.SgemmEpilogue(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nil)
}

// SgemmEpilogue is [Impl.Sgemm] followed by epi on the result, with the
// contract of the package-level [SgemmEpilogue].
func (g *Impl) SgemmEpilogue(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, epi Epilogue) {
	g.SgemmFused(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nil, epi)
}

// SgemmFused is [Impl.SgemmEpilogue] with addends, with the contract of
// the package-level [SgemmFused].
func (g *Impl) SgemmFused(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue) {
	checkArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	add = add.checked(m, n)
	switch {
	case k == 0 || alpha == 0:
		scaleC(m, n, beta, c, ldc)
	case g.lib != nil:
		g.lib.SetThreads(g.threads)
		g.lib.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	case g.useRowA(transA, transB, m, n, k):
		g.runRowA(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	case g.useDot(transA, transB, m, n, k):
		g.runDot(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	case n < 32 && g.padded(n, m)*4 < g.padded(m, n)*3:
		// Few columns, whose tiles would be mostly padding: computed as
		// the transpose.
		g.runSwapped(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	default:
		// The blocked path adds the addends and runs epi block by block,
		// as each is finished.
		g.run(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, add, epi)
		return
	}
	if add != nil {
		add.apply(c, ldc, 0, 0, m, n)
	}
	if epi != nil {
		epi(0, m, 0, n)
	}
}

// padded returns the area of C's tiles, padding included, for an m×n
// product on the kernel pick chooses.
func (g *Impl) padded(m, n int) int {
	ar := g.pick(m, n)
	return (m + ar.mr - 1) / ar.mr * ar.mr * ((n + ar.nr - 1) / ar.nr * ar.nr)
}

// runSwapped computes a product with few columns as its transpose,
// Cᵀ = op(B)ᵀ·op(A)ᵀ, whose many columns fill the kernel's vectors, into a
// scratch n×m matrix, and then adds that into C.
func (g *Impl) runSwapped(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	buf := g.bufs.Get().(*packBuf)
	buf.t = grow(buf.t, m*n)
	t := buf.t
	g.run(!transB, !transA, n, m, k, alpha, b, ldb, a, lda, 0, t, m, nil, nil)
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		for j := range row {
			if beta == 0 {
				row[j] = t[j*m+i]
			} else {
				row[j] = t[j*m+i] + beta*row[j]
			}
		}
	}
	g.bufs.Put(buf)
}

// Kernels returns the names of cohort's kernels this CPU can run, slowest
// first.
func Kernels() []string {
	ks := []string{KernelGo}
	if hasAVX2() {
		ks = append(ks, KernelAVX2)
	}
	if hasAVX512() {
		ks = append(ks, KernelAVX512)
	}
	return ks
}
