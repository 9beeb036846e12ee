package gemmbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/cohortml/cohort/tensor/internal/gemm"
)

// Shape is one sgemm problem: C[m×n] = op(A)[m×k]·op(B)[k×n].
type Shape struct {
	Name           string
	TransA, TransB bool
	M, N, K        int
}

// Flops is the floating-point operation count, 2·m·n·k.
func (s Shape) Flops() float64 { return 2 * float64(s.M) * float64(s.N) * float64(s.K) }

// LDs returns the leading dimensions of op(A) and op(B) stored densely:
// K and N, M when A is transposed, K when B is.
func (s Shape) LDs() (lda, ldb int) {
	lda, ldb = s.K, s.N
	if s.TransA {
		lda = s.M
	}
	if s.TransB {
		ldb = s.K
	}
	return lda, ldb
}

// Shapes returns the benchmark table: square sizes, the two shapes the
// issue names, the products of one training step of the anchor MLP
// (batch 64, 784-1024-1024-10; PyTorch's Linear stores W as out×in, so the
// forward is x·Wᵀ (NT), the input gradient dy·W (NN) and the weight
// gradient dyᵀ·x (TN)), and those of GPT-mini (see gptShapes).
func Shapes() []Shape {
	return append(mlpShapes(), gptShapes()...)
}

func mlpShapes() []Shape {
	return []Shape{
		{Name: "128^3", M: 128, N: 128, K: 128},
		{Name: "512^3", M: 512, N: 512, K: 512},
		{Name: "1024^3", M: 1024, N: 1024, K: 1024},
		{Name: "2048^3", M: 2048, N: 2048, K: 2048},
		{Name: "64x784*784x1024", M: 64, N: 1024, K: 784},
		{Name: "1024x1024*1024x64", M: 1024, N: 64, K: 1024},
		{Name: "mlp fc1 fwd NT", TransB: true, M: 64, N: 1024, K: 784},
		{Name: "mlp fc2 fwd NT", TransB: true, M: 64, N: 1024, K: 1024},
		{Name: "mlp fc3 fwd NT", TransB: true, M: 64, N: 10, K: 1024},
		{Name: "mlp fc3 dx NN", M: 64, N: 1024, K: 10},
		{Name: "mlp fc2 dx NN", M: 64, N: 1024, K: 1024},
		{Name: "mlp fc3 dW TN", TransA: true, M: 10, N: 1024, K: 64},
		{Name: "mlp fc2 dW TN", TransA: true, M: 1024, N: 1024, K: 64},
		{Name: "mlp fc1 dW TN", TransA: true, M: 1024, N: 784, K: 64},
	}
}

// gptShapes are the distinct products of one GPT-mini training step
// (models.GPTMini: d=128, 4 heads of 32, MLP 512, vocabulary 256, batch
// 32×64 tokens = 2048 rows), each run once per layer (4 layers) unless
// noted:
//
//   - the Linear layers: forward x·Wᵀ (NT; the step runs it with beta 1,
//     C holding the bias), input gradient dy·W (NN) and weight gradient
//     dyᵀ·x (TN, k = 2048 tokens), for qkv (128→384), proj (128→128), fc1
//     (128→512) and fc2 (512→128), and the tied head (128→256, once);
//   - attention, per sequence and head (512 calls of each per step, on
//     strided views of the qkv activations; here contiguous): q·kᵀ and
//     its gradients, all 64 tokens × 32 head dims;
//   - "gpt mb" rows: the same layers on one pipeline microbatch of 4×64
//     tokens (256 rows).
//
// The benchmark runs every product with beta 0.
func gptShapes() []Shape {
	var s []Shape
	for _, mb := range []struct {
		name string
		rows int
	}{{"gpt", 2048}, {"gpt mb", 256}} {
		for _, l := range []struct {
			name    string
			in, out int
		}{{"qkv", 128, 384}, {"proj", 128, 128}, {"fc1", 128, 512}, {"fc2", 512, 128}, {"head", 128, 256}} {
			s = append(s,
				Shape{Name: mb.name + " " + l.name + " fwd NT", TransB: true, M: mb.rows, N: l.out, K: l.in},
				Shape{Name: mb.name + " " + l.name + " dx NN", M: mb.rows, N: l.in, K: l.out},
				Shape{Name: mb.name + " " + l.name + " dW TN", TransA: true, M: l.out, N: l.in, K: mb.rows})
		}
	}
	const T, hd = 64, 32
	return append(s,
		Shape{Name: "gpt att q·kT NT", TransB: true, M: T, N: T, K: hd},
		Shape{Name: "gpt att p·v NN", M: T, N: hd, K: T},
		Shape{Name: "gpt att dv TN", TransA: true, M: T, N: hd, K: T},
		Shape{Name: "gpt att dp NT", TransB: true, M: T, N: T, K: hd},
		Shape{Name: "gpt att dq NN", M: T, N: hd, K: T},
		Shape{Name: "gpt att dk TN", TransA: true, M: T, N: hd, K: T},
	)
}

// Options configures Run. The zero value runs the full table at 1 and 2
// threads with 7 rounds of at least 40 ms per implementation.
type Options struct {
	Shapes  []Shape       // nil: Shapes()
	Threads []int         // nil: 1 and 2
	Rounds  int           // alternating rounds per row; 0: 7
	MinTime time.Duration // minimum timed duration per round and implementation; 0: 40ms
	// Kernel is cohort's kernel ("" = the best the CPU has); OpenBLASLib
	// the library to compare with ("" = libopenblas.so.0).
	Kernel      string
	OpenBLASLib string
}

// Result is one row: median GFLOP/s of each implementation and their
// ratio. OpenBLAS is 0 and Ratio NaN-free 0 when OpenBLAS was not found.
type Result struct {
	Shape    Shape
	Threads  int
	Cohort   float64 // GFLOP/s, median over rounds
	OpenBLAS float64 // GFLOP/s, median over rounds; 0 without OpenBLAS
	Ratio    float64 // Cohort / OpenBLAS; 0 without OpenBLAS
}

// runDefaults fills in the defaults that Options and BF16Options share
// (shapes from def, threads 1 and 2, 7 rounds of at least 40 ms) and
// checks the rounds and the minimum time.
func runDefaults(shapes []Shape, def func() []Shape, threads []int, rounds int, minTime time.Duration) ([]Shape, []int, int, time.Duration, error) {
	if shapes == nil {
		shapes = def()
	}
	if threads == nil {
		threads = []int{1, 2}
	}
	if rounds == 0 {
		rounds = 7
	}
	if minTime == 0 {
		minTime = 40 * time.Millisecond
	}
	if rounds < 1 || minTime < 0 {
		return nil, nil, 0, 0, fmt.Errorf("gemmbench: rounds %d, min time %v: want positive", rounds, minTime)
	}
	return shapes, threads, rounds, minTime, nil
}

// maxSettle bounds the wait for the process to go idle before a timed run.
const maxSettle = time.Second

// Run measures every shape at every thread count, writes a table to w as
// rows complete, and ends with the line
//
//	gemm: cohort/openblas median ratio R
//
// (R is the median of the rows' ratios, or "n/a" with the reason when
// OpenBLAS is not available). It checks each implementation's output
// against the naive reference on every shape before timing it. Before
// each timed run it waits (up to a second, see [WaitIdle]) for the
// threads of the previous one to go quiet: OpenBLAS's workers spin for
// about 0.1 s after a call, and a multi-threaded run timed meanwhile
// would share a core with them. It stops early, returning ctx.Err(), when
// ctx is done.
func Run(ctx context.Context, w io.Writer, o Options) ([]Result, error) {
	var err error
	if o.Shapes, o.Threads, o.Rounds, o.MinTime, err = runDefaults(o.Shapes, Shapes, o.Threads, o.Rounds, o.MinTime); err != nil {
		return nil, err
	}
	for _, t := range o.Threads {
		if t < 1 {
			return nil, fmt.Errorf("gemmbench: threads %d: want at least 1", t)
		}
	}

	var results []Result
	var noBLAS error
	header := false
	busy := 0 // timed runs that started before the process went idle
	settle := func(ctx context.Context) bool {
		_, idle := WaitIdle(ctx, maxSettle)
		return idle || !hasProcessCPU
	}
	for _, threads := range o.Threads {
		cohort, err := gemm.New(gemm.Options{BLAS: gemm.BLASGo, Kernel: o.Kernel, Threads: threads})
		if err != nil {
			return nil, err
		}
		blas, err := gemm.New(gemm.Options{BLAS: gemm.BLASOpenBLAS, OpenBLASLib: o.OpenBLASLib, Threads: threads})
		if err != nil {
			noBLAS = err
			blas = nil
		}
		if !header {
			fmt.Fprintf(w, "cohort:   %v\n", cohort)
			if blas != nil {
				fmt.Fprintf(w, "openblas: %v\n", blas)
				if note := genericKernelNote(fmt.Sprint(blas)); note != "" {
					fmt.Fprintf(w, "openblas: %s\n", note)
				}
			} else {
				fmt.Fprintf(w, "openblas: not available: %v\n", noBLAS)
			}
			fmt.Fprintf(w, "%-20s %4s %5s %5s %5s %7s %10s %10s %6s\n", "shape", "op", "m", "n", "k", "threads", "cohort", "openblas", "ratio")
			header = true
		}
		for i, s := range o.Shapes {
			if err := ctx.Err(); err != nil {
				return results, err
			}
			p := newProblem(s, uint64(i))
			if err := p.verify(cohort); err != nil {
				return results, err
			}
			if blas != nil {
				if err := p.verify(blas); err != nil {
					return results, err
				}
			}
			var rc, rb []float64
			for r := 0; r < o.Rounds; r++ {
				if err := ctx.Err(); err != nil {
					return results, err
				}
				if !settle(ctx) {
					busy++
				}
				rc = append(rc, p.time(cohort, o.MinTime))
				if blas != nil {
					if !settle(ctx) {
						busy++
					}
					rb = append(rb, p.time(blas, o.MinTime))
				}
			}
			res := Result{Shape: s, Threads: threads, Cohort: median(rc)}
			bs, ratio := "-", "-"
			if blas != nil {
				res.OpenBLAS = median(rb)
				res.Ratio = res.Cohort / res.OpenBLAS
				bs, ratio = fmt.Sprintf("%10.1f", res.OpenBLAS), fmt.Sprintf("%6.2f", res.Ratio)
			}
			results = append(results, res)
			fmt.Fprintf(w, "%-20s %4s %5d %5d %5d %7d %10.1f %10s %6s\n", s.Name, ops(s), s.M, s.N, s.K, threads, res.Cohort, bs, ratio)
		}
	}
	fmt.Fprintln(w, "(GFLOP/s, median of", o.Rounds, "alternating rounds; ratio = cohort/openblas)")
	if busy > 0 {
		fmt.Fprintf(w, "gemm: warning: %d timed runs started while this process was still busy (threads of the other implementation spinning)\n", busy)
	}
	if noBLAS != nil {
		fmt.Fprintf(w, "gemm: cohort/openblas median ratio n/a (%v)\n", noBLAS)
		return results, nil
	}
	for _, threads := range o.Threads {
		var rs []float64
		for _, r := range results {
			if r.Threads == threads {
				rs = append(rs, r.Ratio)
			}
		}
		fmt.Fprintf(w, "gemm: threads=%d median ratio %.2f\n", threads, median(rs))
	}
	fmt.Fprintf(w, "gemm: cohort/openblas median ratio %.2f\n", MedianRatio(results))
	return results, nil
}

// MedianRatio returns the median of the rows' cohort/openblas ratios (0
// when there are none).
func MedianRatio(results []Result) float64 {
	var rs []float64
	for _, r := range results {
		if r.Ratio > 0 {
			rs = append(rs, r.Ratio)
		}
	}
	return median(rs)
}

func ops(s Shape) string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return t(s.TransA) + t(s.TransB)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// problem holds one shape's operands.
type problem struct {
	s             Shape
	a, b, c       []float32
	lda, ldb, ldc int
}

func newProblem(s Shape, seed uint64) *problem {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	p := &problem{s: s, ldc: s.N}
	p.lda, p.ldb = s.LDs()
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 2*rng.Float32() - 1
		}
		return v
	}
	p.a, p.b, p.c = fill(s.M*s.K), fill(s.K*s.N), make([]float32, s.M*s.N)
	return p
}

func (p *problem) run(g *gemm.Impl) {
	s := p.s
	g.Sgemm(s.TransA, s.TransB, s.M, s.N, s.K, 1, p.a, p.lda, p.b, p.ldb, 0, p.c, p.ldc)
}

// reference returns the naive product's first rows (at most 3), the
// rows that verify and verifyBF16 check, as a rows×N matrix.
func (p *problem) reference() (rows int, want []float32) {
	s := p.s
	rows = min(s.M, 3)
	want = make([]float32, rows*s.N)
	a := p.a
	if !s.TransA {
		a = p.a[:rows*p.lda]
	}
	gemm.Naive(s.TransA, s.TransB, rows, s.N, s.K, 1, a, p.lda, p.b, p.ldb, 0, want, s.N)
	return rows, want
}

// verify checks g's result on a few rows against the reference.
func (p *problem) verify(g *gemm.Impl) error {
	p.run(g)
	s := p.s
	rows, want := p.reference()
	for i := range rows {
		for j := range s.N {
			got, w := p.c[i*p.ldc+j], want[i*s.N+j]
			if d := got - w; d > 1e-3*float32(s.K) || d < -1e-3*float32(s.K) || got != got {
				return errors.New(strings.TrimSpace(fmt.Sprintf("gemmbench: %v gives C[%d][%d] = %v on %s, want %v", g, i, j, got, s.Name, w)))
			}
		}
	}
	return nil
}

// time returns g's GFLOP/s over at least minTime of back-to-back calls
// (after one untimed call).
func (p *problem) time(g *gemm.Impl, minTime time.Duration) float64 {
	p.run(g)
	n := 0
	start := time.Now()
	for {
		p.run(g)
		n++
		if el := time.Since(start); el >= minTime {
			return p.s.Flops() * float64(n) / el.Seconds() / 1e9
		}
	}
}

// Describe returns what the process-wide sgemm (gemm.Default, configured
// from COHORT_NUM_THREADS, COHORT_BLAS, COHORT_GEMM_KERNEL and
// COHORT_OPENBLAS_LIB at first use) runs, e.g. "cohort avx512 14×32+6×64,
// 1 thread", or the configuration error.
func Describe() (string, error) {
	g, err := gemm.Default()
	if err != nil {
		return "", err
	}
	return g.String(), nil
}

// genericKernelNote explains an OpenBLAS description naming its generic
// kernel (Prescott) on a CPU with AVX2 or AVX-512: an OpenBLAS release
// older than the CPU does not recognise it (0.3.21 on a family 6 model 207
// Xeon ran its products about 3x slower), so a comparison with it
// flatters cohort. It returns "" otherwise.
func genericKernelNote(desc string) string {
	if !strings.Contains(" "+desc+" ", " Prescott ") || !cpu.X86.HasAVX2 {
		return ""
	}
	want := "Haswell"
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512DQ {
		want = "SkylakeX"
	}
	return fmt.Sprintf("runs its generic Prescott kernel on this CPU (a release older than the CPU); OPENBLAS_CORETYPE=%s selects the kernel this CPU supports", want)
}
