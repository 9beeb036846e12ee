package gemmbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/tensor/internal/gemm"
)

// BF16Options configures RunBF16. The zero value runs BF16Shapes at 1
// and 2 threads, 7 rounds of at least 40 ms per dtype, with the peak
// taken from /proc/cpuinfo's clock and two 512-bit FMA units per core.
type BF16Options struct {
	Shapes  []Shape       // nil: BF16Shapes()
	Threads []int         // nil: 1 and 2
	Rounds  int           // alternating rounds per row; 0: 7
	MinTime time.Duration // per round and dtype; 0: 40ms
	Kernel  string        // cohort's kernel, as gemm.Options.Kernel ("" = the best the CPU has)
	// ClockGHz is the core clock the peak is computed from; 0: the first
	// "cpu MHz" of /proc/cpuinfo (no peak column when neither is known).
	ClockGHz float64
	// FP32FlopsPerCycle is one core's float32 FMA peak in flop per cycle;
	// 0: 64 (two 512-bit FMA units: 2 × 16 lanes × 2 flop). The bfloat16
	// peak is twice it (VDPBF16PS: two products per lane per FMA slot).
	FP32FlopsPerCycle float64
}

// BF16Result is one row: median GFLOP/s of the float32 product (Sgemm)
// and of the bfloat16 one (GemmBF16, operands already in bfloat16), their
// ratio, and the bfloat16 rate as a fraction of its peak (0 when the
// clock is unknown).
type BF16Result struct {
	Shape         Shape
	Threads       int
	FP32, BF16    float64
	Ratio         float64 // BF16 / FP32
	FracBF16Peak  float64
	FracFP32Peak  float64
	PeakBF16GFLOP float64
}

// BF16Shapes returns the bfloat16 table: the 1024³ and 2048³ squares and
// GPT-mini's products (see Shapes).
func BF16Shapes() []Shape {
	s := []Shape{
		{Name: "1024^3", M: 1024, N: 1024, K: 1024},
		{Name: "2048^3", M: 2048, N: 2048, K: 2048},
	}
	return append(s, gptShapes()...)
}

// RunBF16 measures the bfloat16 product against the float32 one of the
// same Impl, shape by shape, the two alternating round by round, writes a
// table to w and ends with the line
//
//	gemm: bf16/fp32 median ratio R (threads=T)
//
// per thread count. Each bfloat16 result is checked against the float32
// reference first (within 2⁻⁶ of Σ|a||b|, far above the rounding of its
// inputs, so a wrong kernel fails and a right one passes).
func RunBF16(ctx context.Context, w io.Writer, o BF16Options) ([]BF16Result, error) {
	var err error
	if o.Shapes, o.Threads, o.Rounds, o.MinTime, err = runDefaults(o.Shapes, BF16Shapes, o.Threads, o.Rounds, o.MinTime); err != nil {
		return nil, err
	}
	if o.FP32FlopsPerCycle == 0 {
		o.FP32FlopsPerCycle = 64
	}
	if o.ClockGHz == 0 {
		o.ClockGHz = cpuinfoGHz()
	}
	var results []BF16Result
	for ti, threads := range o.Threads {
		if threads < 1 {
			return nil, fmt.Errorf("gemmbench: threads %d: want at least 1", threads)
		}
		g, err := gemm.New(gemm.Options{BLAS: gemm.BLASGo, Kernel: o.Kernel, Threads: threads})
		if err != nil {
			return nil, err
		}
		peak32 := o.ClockGHz * o.FP32FlopsPerCycle * float64(threads)
		if ti == 0 {
			fmt.Fprintf(w, "cohort: %v; bf16 path %s\n", g, g.BF16Kernel())
			if o.ClockGHz > 0 {
				fmt.Fprintf(w, "peak per core: %.3f GHz × %g flop/cycle fp32 = %.1f GFLOP/s, bf16 (2×) %.1f GFLOP/s\n",
					o.ClockGHz, o.FP32FlopsPerCycle, o.ClockGHz*o.FP32FlopsPerCycle, 2*o.ClockGHz*o.FP32FlopsPerCycle)
			}
			fmt.Fprintf(w, "%-20s %4s %5s %5s %5s %7s %8s %8s %6s %8s %8s\n", "shape", "op", "m", "n", "k", "threads", "fp32", "bf16", "ratio", "fp32/pk", "bf16/pk")
		}
		for i, s := range o.Shapes {
			if err := ctx.Err(); err != nil {
				return results, err
			}
			p := newProblem(s, uint64(i))
			a16, b16 := make([]uint16, len(p.a)), make([]uint16, len(p.b))
			g.ToBF16(a16, p.a)
			g.ToBF16(b16, p.b)
			run16 := func() {
				g.GemmBF16(s.TransA, s.TransB, s.M, s.N, s.K, 1, a16, p.lda, b16, p.ldb, 0, p.c, p.ldc)
			}
			if err := p.verifyBF16(g, run16); err != nil {
				return results, err
			}
			var r32, r16 []float64
			for r := 0; r < o.Rounds; r++ {
				if err := ctx.Err(); err != nil {
					return results, err
				}
				r32 = append(r32, p.time(g, o.MinTime))
				r16 = append(r16, timeFunc(s, run16, o.MinTime))
			}
			res := BF16Result{Shape: s, Threads: threads, FP32: median(r32), BF16: median(r16)}
			res.Ratio = res.BF16 / res.FP32
			pk32, pk16 := "-", "-"
			if peak32 > 0 {
				res.PeakBF16GFLOP = 2 * peak32
				res.FracFP32Peak, res.FracBF16Peak = res.FP32/peak32, res.BF16/(2*peak32)
				pk32, pk16 = fmt.Sprintf("%.2f", res.FracFP32Peak), fmt.Sprintf("%.2f", res.FracBF16Peak)
			}
			results = append(results, res)
			fmt.Fprintf(w, "%-20s %4s %5d %5d %5d %7d %8.1f %8.1f %6.2f %8s %8s\n", s.Name, ops(s), s.M, s.N, s.K, threads, res.FP32, res.BF16, res.Ratio, pk32, pk16)
		}
	}
	fmt.Fprintln(w, "(GFLOP/s, median of", o.Rounds, "alternating rounds; ratio = bf16/fp32; /pk = fraction of the unit's peak)")
	for _, threads := range o.Threads {
		var rs []float64
		for _, r := range results {
			if r.Threads == threads {
				rs = append(rs, r.Ratio)
			}
		}
		fmt.Fprintf(w, "gemm: bf16/fp32 median ratio %.2f (threads=%d)\n", median(rs), threads)
	}
	return results, nil
}

// verifyBF16 runs the bfloat16 product and checks a few rows against the
// float32 reference.
func (p *problem) verifyBF16(g *gemm.Impl, run func()) error {
	run()
	s := p.s
	rows, want := p.reference()
	for i := range rows {
		for j := range s.N {
			got, w := p.c[i*p.ldc+j], want[i*s.N+j]
			// |a|, |b| < 1: Σ|a||b| < k.
			if d := math.Abs(float64(got - w)); !(d <= float64(s.K)*0x1p-6) {
				return fmt.Errorf("gemmbench: %v bf16 path %s gives C[%d][%d] = %v on %s, want %v", g, g.BF16Kernel(), i, j, got, s.Name, w)
			}
		}
	}
	return nil
}

// timeFunc returns run's GFLOP/s for shape s over at least minTime of
// back-to-back calls (after one untimed call).
func timeFunc(s Shape, run func(), minTime time.Duration) float64 {
	run()
	n := 0
	start := time.Now()
	for {
		run()
		n++
		if el := time.Since(start); el >= minTime {
			return s.Flops() * float64(n) / el.Seconds() / 1e9
		}
	}
}

// cpuinfoGHz returns the first "cpu MHz" of /proc/cpuinfo in GHz, or 0.
func cpuinfoGHz() float64 {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return mhz / 1000
			}
		}
	}
	return 0
}
