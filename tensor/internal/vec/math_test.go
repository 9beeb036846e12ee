package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// mathPaths runs f with the portable kernels and, where the CPU has them,
// the AVX2 and the AVX-512 ones.
func mathPaths(t *testing.T, f func(t *testing.T, m Math)) {
	t.Run("go", func(t *testing.T) { f(t, NewMath(true)) })
	if m := NewMath(false); m.Asm() {
		t.Run("avx2", func(t *testing.T) { f(t, Math{asm: true}) })
		if m.wide {
			t.Run("avx512", func(t *testing.T) { f(t, m) })
		}
	}
}

// TestWideMatchesAVX2: the 16-lane kernels give every element exactly the
// AVX2 kernels' value, over lengths that leave 8- and 1-element tails and
// inputs across exp's clamps and subnormal results, NaN and ±Inf
// included.
func TestWideMatchesAVX2(t *testing.T) {
	wide := NewMath(false)
	if !wide.wide {
		t.Skip("no AVX-512F on this CPU")
	}
	narrow := Math{asm: true}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{16, 24, 31, 1000} {
		x, g := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i], g[i] = float32(rng.NormFloat64()*30), float32(rng.NormFloat64())
		}
		x[0], x[1], x[2], x[3] = float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), -100
		// exp's results below the smallest normal (x down to its clamp,
		// −87.336) and 2ⁿ at its extremes.
		x[4], x[5], x[6], x[7] = -87.33, -87.1, -86.5, 88.7
		for name, f := range map[string]func(m Math, dst []float32) float32{
			"exp":       func(m Math, dst []float32) float32 { m.Exp(dst, x); return 0 },
			"gelu":      func(m Math, dst []float32) float32 { m.GELUTanh(dst, x); return 0 },
			"gelu grad": func(m Math, dst []float32) float32 { m.GELUTanhGrad(dst, g, x); return 0 },
			"exp shift": func(m Math, dst []float32) float32 { return m.ExpShiftSum(dst[4:], x[4:], 0.5, 3) },
		} {
			a, b := make([]float32, n), make([]float32, n)
			sa, sb := f(wide, a), f(narrow, b)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
					t.Fatalf("%s n=%d: element %d (x = %g): 16 lanes %g, 8 lanes %g", name, n, i, x[i], a[i], b[i])
				}
			}
			if d := math.Abs(float64(sa - sb)); d > 1e-5*math.Abs(float64(sb)) {
				t.Fatalf("%s n=%d: sums %g and %g", name, n, sa, sb)
			}
		}
	}
}

// ulp32 is the spacing of float32 values at |w| (the smallest normal's
// spacing below it).
func ulp32(w float64) float64 {
	a := math.Abs(w)
	if a < 0x1p-126 {
		return 0x1p-149
	}
	_, e := math.Frexp(a) // a = f·2^e, f in [0.5, 1)
	return math.Ldexp(1, e-24)
}

// sweep returns every stride-th float32 in [lo, hi] plus 0 and ±tiny
// values, in a length that is not a multiple of 8 (so the tail runs too).
func sweep(lo, hi float32, count int) []float32 {
	var xs []float32
	step := float64(hi-lo) / float64(count)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < count; i++ {
		xs = append(xs, float32(float64(lo)+(float64(i)+rng.Float64())*step))
	}
	xs = append(xs, 0, 1e-30, -1e-30, 1e-7, -1e-7, lo, hi)
	return xs
}

const geluK = 0.7978845608028654 // √(2/π)

// geluRef is ½x·(1 + tanh u) in float64, written as x·σ(2u) (the same
// function) so that it does not cancel to 0 for very negative x.
func geluRef(x float64) float64 { return x / (1 + math.Exp(-2*geluK*(x+0.044715*x*x*x))) }

// geluGradRef is ½(1 + tanh u) + ½x·(1 − tanh²u)·u′ as σ(2u) + x·σ(1−σ)·2u′.
func geluGradRef(x float64) float64 {
	e := math.Exp(-2 * geluK * (x + 0.044715*x*x*x))
	s := 1 / (1 + e)
	return s + x*s*(e*s)*2*geluK*(1+3*0.044715*x*x)
}

// twoU is |2u|, the argument of the exponential in GELU-tanh.
func twoU(x float64) float64 { return math.Abs(2 * geluK * (x + 0.044715*x*x*x)) }

func TestExpAccuracy(t *testing.T) {
	mathPaths(t, func(t *testing.T, m Math) {
		xs := sweep(-87.3, 88, 1<<20+3)
		got := make([]float32, len(xs))
		m.Exp(got, xs)
		worst := 0.0
		for i, x := range xs {
			want := math.Exp(float64(x))
			e := math.Abs(float64(got[i])-want) / ulp32(want)
			if e > worst {
				worst = e
			}
			if e > 2 {
				t.Fatalf("exp(%g) = %g, want %g: %.2f ULP > 2", x, got[i], want, e)
			}
		}
		t.Logf("worst %.3f ULP", worst)
		// ExpShiftSum is Exp of scale·x − shift plus the sum.
		ys := make([]float32, len(xs))
		for i, x := range xs {
			ys[i] = x/2 - 3
		}
		want := make([]float32, len(xs))
		m.Exp(want, ys)
		var ref float64
		for _, v := range want {
			ref += float64(v)
		}
		got2 := make([]float32, len(xs))
		sum := m.ExpShiftSum(got2, xs, 0.5, 3)
		for i := range xs {
			if d := math.Abs(float64(got2[i]) - float64(want[i])); d > 2*ulp32(float64(want[i])) {
				t.Fatalf("ExpShiftSum[%d] = %g, Exp gives %g", i, got2[i], want[i])
			}
		}
		if math.Abs(float64(sum)-ref) > 1e-5*ref {
			t.Fatalf("ExpShiftSum sum %g, want %g", sum, ref)
		}
	})
}

func TestExpSpecial(t *testing.T) {
	mathPaths(t, func(t *testing.T, m Math) {
		for _, tc := range []struct {
			x, want float32
		}{
			{0, 1}, {float32(math.Inf(-1)), 0}, {-100, 0}, {-87.4, 0},
			{float32(math.Inf(1)), float32(math.Exp(88))}, {100, float32(math.Exp(88))},
		} {
			in := make([]float32, 9) // 8 through the assembly, 1 through the tail
			for i := range in {
				in[i] = tc.x
			}
			out := make([]float32, 9)
			m.Exp(out, in)
			for i, v := range out {
				if math.Abs(float64(v-tc.want)) > 2*ulp32(float64(tc.want)) {
					t.Errorf("exp(%g)[%d] = %g, want %g", tc.x, i, v, tc.want)
				}
			}
		}
		in := make([]float32, 9)
		for i := range in {
			in[i] = float32(math.NaN())
		}
		out := make([]float32, 9)
		m.Exp(out, in)
		for i, v := range out {
			if v == v {
				t.Errorf("exp(NaN)[%d] = %g", i, v)
			}
		}
	})
}

func TestGELUTanhAccuracy(t *testing.T) {
	mathPaths(t, func(t *testing.T, m Math) {
		for _, r := range []struct{ lo, hi float32 }{{-12, 12}, {-1, 1}, {-9, -3}, {3, 40}} {
			t.Run(fmt.Sprintf("x=%g..%g", r.lo, r.hi), func(t *testing.T) {
				xs := sweep(r.lo, r.hi, 1<<18+5)
				y := make([]float32, len(xs))
				m.GELUTanh(y, xs)
				g := make([]float32, len(xs))
				ones := make([]float32, len(xs))
				for i := range ones {
					ones[i] = 1
				}
				m.GELUTanhGrad(g, ones, xs)
				worstY, worstG := 0.0, 0.0
				for i, x32 := range xs {
					x := float64(x32)
					want := geluRef(x)
					if x >= -9 {
						e := math.Abs(float64(y[i])-want) / ulp32(want)
						bound := 4 + 3*twoU(x)
						worstY = max(worstY, e/bound)
						if e > bound {
							t.Fatalf("gelu(%g) = %g, want %g: %.2f ULP > %.2f", x, y[i], want, e, bound)
						}
					} else if d := math.Abs(float64(y[i]) - want); d > 1e-30 {
						t.Fatalf("gelu(%g) = %g, want %g", x, y[i], want)
					}
					wg := geluGradRef(x)
					d := math.Abs(float64(g[i]) - wg)
					bound := max((8+3*twoU(x))*ulp32(wg), 2e-7)
					worstG = max(worstG, d/bound)
					if d > bound {
						t.Fatalf("gelu'(%g) = %g, want %g: error %g > %g", x, g[i], wg, d, bound)
					}
				}
				t.Logf("worst error / bound: value %.3f, derivative %.3f", worstY, worstG)
			})
		}
	})
}

func TestGELUTanhGradScales(t *testing.T) {
	mathPaths(t, func(t *testing.T, m Math) {
		rng := rand.New(rand.NewPCG(1, 2))
		n := 37
		x, g := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i], g[i] = float32(rng.NormFloat64()*3), float32(rng.NormFloat64())
		}
		ones := make([]float32, n)
		for i := range ones {
			ones[i] = 1
		}
		d, got := make([]float32, n), make([]float32, n)
		m.GELUTanhGrad(d, ones, x)
		m.GELUTanhGrad(got, g, x)
		for i := range got {
			if want := g[i] * d[i]; got[i] != want {
				t.Fatalf("grad[%d] = %g, want g·d = %g", i, got[i], want)
			}
		}
	})
}

// TestSoftmaxGradRow: every element is p·(ds − Σ p·ds)·scale, rounded
// as the formula reads, with the dot product the path's own, over lengths
// on and off the vector width.
func TestSoftmaxGradRow(t *testing.T) {
	mathPaths(t, func(t *testing.T, m Math) {
		rng := rand.New(rand.NewPCG(13, 14))
		for _, n := range []int{0, 1, 7, 8, 33, 64} {
			p, ds := make([]float32, n), make([]float32, n)
			for i := range p {
				p[i], ds[i] = rng.Float32(), float32(rng.NormFloat64())
			}
			dot := m.Dot(p, ds)
			want := make([]float32, n)
			for i := range want {
				want[i] = p[i] * (ds[i] - dot) * 0.125
			}
			m.SoftmaxGradRow(ds, p, 0.125)
			for i := range ds {
				if ds[i] != want[i] {
					t.Fatalf("n=%d: ds[%d] = %v, want %v", n, i, ds[i], want[i])
				}
			}
		}
	})
}

func TestReductions(t *testing.T) {
	mathPaths(t, func(t *testing.T, m Math) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, n := range []int{0, 1, 7, 8, 9, 16, 17, 64, 255, 256, 1000} {
			t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
				a, b := make([]float32, n), make([]float32, n)
				for i := range a {
					a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
				}
				mx, dot, abs := math.Inf(-1), 0.0, 0.0
				for i := range a {
					mx = math.Max(mx, float64(a[i]))
					dot += float64(a[i]) * float64(b[i])
					abs += math.Abs(float64(a[i]) * float64(b[i]))
				}
				if got := m.Max(a); float64(got) != mx {
					t.Errorf("Max = %g, want %g", got, mx)
				}
				if got := m.Dot(a, b); math.Abs(float64(got)-dot) > 1e-6*abs+1e-7 {
					t.Errorf("Dot = %g, want %g", got, dot)
				}
				s := make([]float32, n)
				m.Scale(s, a, 1.5)
				for i := range s {
					if s[i] != 1.5*a[i] {
						t.Fatalf("Scale[%d] = %g, want %g", i, s[i], 1.5*a[i])
					}
				}
			})
		}
	})
}

func BenchmarkMath(b *testing.B) {
	const n = 2048 * 512
	x, y := make([]float32, n), make([]float32, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, p := range []bool{true, false} {
		m := NewMath(p)
		name := "go"
		if m.Asm() {
			name = "asm"
		} else if !p {
			continue
		}
		b.Run("exp/"+name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				m.Exp(y, x)
			}
		})
		b.Run("gelu/"+name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				m.GELUTanh(y, x)
			}
		})
		b.Run("gelugrad/"+name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				m.GELUTanhGrad(y, x, x)
			}
		})
		// LayerNorm over GPT-mini's rows: 2048 of 128.
		const rows, width = 2048, 128
		w, bias, dw, db := x[:width], x[width:2*width], make([]float32, width), make([]float32, width)
		stats := make([]float32, 2*rows)
		b.Run("layernorm/"+name, func(b *testing.B) {
			b.SetBytes(4 * rows * width)
			for b.Loop() {
				for r := 0; r < rows; r++ {
					stats[2*r], stats[2*r+1] = m.LayerNormRow(y[r*width:(r+1)*width], x[r*width:(r+1)*width], w, bias, 1e-5)
				}
			}
		})
		b.Run("layernormgrad/"+name, func(b *testing.B) {
			b.SetBytes(4 * rows * width)
			for b.Loop() {
				for r := 0; r < rows; r++ {
					m.LayerNormGradRow(y[r*width:(r+1)*width], x[(r+1)*width:(r+2)*width], x[r*width:(r+1)*width], w, dw, db, stats[2*r], stats[2*r+1])
				}
			}
		})
	}
}

func TestLayerNormRow(t *testing.T) {
	mathPaths(t, func(t *testing.T, m Math) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, n := range []int{1, 7, 8, 24, 128, 130} {
			t.Run(fmt.Sprintf("D=%d", n), func(t *testing.T) {
				x, w, b, g := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
				for i := range x {
					x[i] = float32(rng.NormFloat64()*2 + 3)
					w[i], b[i], g[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())
				}
				const eps = 1e-5
				// float64 reference.
				var mean, ss float64
				for _, v := range x {
					mean += float64(v)
				}
				mean /= float64(n)
				for _, v := range x {
					ss += (float64(v) - mean) * (float64(v) - mean)
				}
				rstd := 1 / math.Sqrt(ss/float64(n)+eps)
				xh := make([]float64, n)
				var s1, s2 float64
				for j, v := range x {
					xh[j] = (float64(v) - mean) * rstd
					dh := float64(g[j]) * float64(w[j])
					s1 += dh
					s2 += dh * xh[j]
				}
				s1 /= float64(n)
				s2 /= float64(n)

				y := make([]float32, n)
				gm, gr := m.LayerNormRow(y, x, w, b, eps)
				if math.Abs(float64(gm)-mean) > 1e-6*math.Abs(mean)+1e-6 || math.Abs(float64(gr)-rstd) > 1e-5*rstd {
					t.Fatalf("mean, rstd = %g, %g, want %g, %g", gm, gr, mean, rstd)
				}
				for j := range y {
					want := xh[j]*float64(w[j]) + float64(b[j])
					if math.Abs(float64(y[j])-want) > 1e-5*(1+math.Abs(want)) {
						t.Fatalf("y[%d] = %g, want %g", j, y[j], want)
					}
				}
				dx, dw, db := make([]float32, n), make([]float32, n), make([]float32, n)
				for j := range dw {
					dw[j], db[j] = 1, 2 // accumulated into
				}
				m.LayerNormGradRow(dx, g, x, w, dw, db, gm, gr)
				for j := range dx {
					wantDx := rstd * (float64(g[j])*float64(w[j]) - s1 - xh[j]*s2)
					if math.Abs(float64(dx[j])-wantDx) > 1e-5*(1+math.Abs(wantDx)) {
						t.Fatalf("dx[%d] = %g, want %g", j, dx[j], wantDx)
					}
					if want := 1 + float64(g[j])*xh[j]; math.Abs(float64(dw[j])-want) > 1e-5*(1+math.Abs(want)) {
						t.Fatalf("dw[%d] = %g, want %g", j, dw[j], want)
					}
					if want := 2 + g[j]; db[j] != want {
						t.Fatalf("db[%d] = %g, want %g", j, db[j], want)
					}
				}
			})
		}
	})
}

// TestSoftmaxRows checks every path's SoftmaxRows against a float64
// softmax of each row (masked columns 0), and the one-call AVX-512 block
// bit for bit against the same Math row by row, over sizes with and
// without whole vectors, causal or not, rows whose max is far from 0, and
// −Inf scores.
func TestSoftmaxRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, T := range []int{1, 5, 16, 20, 48, 64, 128} {
		for _, causal := range []bool{false, true} {
			x := make([]float32, T*T)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 4)
			}
			for i := 0; i < T; i += 3 {
				x[i*T] += 60 // a far max
			}
			if T > 2 {
				x[T+1] = float32(math.Inf(-1)) // a −Inf score in row 1
			}
			name := fmt.Sprintf("T=%d/causal=%v", T, causal)
			mathPaths(t, func(t *testing.T, m Math) {
				s := append([]float32(nil), x...)
				m.SoftmaxRows(s, T, causal)
				for i := 0; i < T; i++ {
					n := T
					if causal {
						n = i + 1
					}
					mx := math.Inf(-1)
					for _, v := range x[i*T : i*T+n] {
						mx = math.Max(mx, float64(v))
					}
					var sum float64
					for _, v := range x[i*T : i*T+n] {
						sum += math.Exp(float64(v) - mx)
					}
					for j := 0; j < T; j++ {
						want := 0.0
						if j < n {
							want = math.Exp(float64(x[i*T+j])-mx) / sum
						}
						if d := math.Abs(float64(s[i*T+j]) - want); d > 1e-6*want+1e-30 && d > 4e-7 {
							t.Fatalf("%s: [%d][%d] = %v, want %v", name, i, j, s[i*T+j], want)
						}
					}
				}
				if m.wide {
					r := append([]float32(nil), x...)
					m.softmaxRowsLoop(r, T, causal)
					for i := range r {
						if math.Float32bits(r[i]) != math.Float32bits(s[i]) {
							t.Fatalf("%s: [%d] = %v in one call, %v row by row", name, i, s[i], r[i])
						}
					}
				}
			})
		}
	}
}

// TestSoftmaxGradRows checks SoftmaxGradRows on every path against
// SoftmaxGradRow row by row: bit for bit where it loops over the rows, and
// within the rounding of the dot (summed over 16 lanes instead of 8)
// where one AVX-512 call does the block; masked entries must be +0.
func TestSoftmaxGradRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, T := range []int{1, 5, 16, 20, 48, 64, 128} {
		for _, causal := range []bool{false, true} {
			p, g := make([]float32, T*T), make([]float32, T*T)
			for i := range p {
				p[i], g[i] = rng.Float32()/float32(T), float32(rng.NormFloat64())
			}
			name := fmt.Sprintf("T=%d/causal=%v", T, causal)
			mathPaths(t, func(t *testing.T, m Math) {
				ds := append([]float32(nil), g...)
				m.SoftmaxGradRows(ds, p, T, causal, 0.125)
				for i := 0; i < T; i++ {
					n := T
					if causal {
						n = i + 1
					}
					want := append([]float32(nil), g[i*T:i*T+n]...)
					m.SoftmaxGradRow(want, p[i*T:i*T+n], 0.125)
					for j := 0; j < T; j++ {
						got := ds[i*T+j]
						switch {
						case j >= n:
							if math.Float32bits(got) != 0 {
								t.Fatalf("%s: masked [%d][%d] = %v, want +0", name, i, j, got)
							}
						case !m.wide || T%16 != 0:
							if math.Float32bits(got) != math.Float32bits(want[j]) {
								t.Fatalf("%s: [%d][%d] = %v, want %v", name, i, j, got, want[j])
							}
						default:
							// The dots differ by a few roundings of terms ≤ |p·g|.
							if d := math.Abs(float64(got - want[j])); d > 1e-6*float64(p[i*T+j])*0.125*float64(n) {
								t.Fatalf("%s: [%d][%d] = %v, want %v", name, i, j, got, want[j])
							}
						}
					}
				}
			})
		}
	}
}

// TestLayerNormRows: the row-block LayerNorm and its gradient equal
// LayerNormRow and LayerNormGradRow one row at a time, bit for bit, on
// every path, over odd and even row counts (the assembly pairs rows),
// widths with and without whole vectors, dx written over grad, and dw and
// db accumulated onto what they held.
func TestLayerNormRows(t *testing.T) {
	mathPaths(t, func(t *testing.T, m Math) {
		rng := rand.New(rand.NewPCG(17, 18))
		for _, n := range []int{1, 8, 24, 128, 130} {
			for _, rows := range []int{0, 1, 2, 3, 8, 33} {
				x, g := make([]float32, rows*n), make([]float32, rows*n)
				w, b := make([]float32, n), make([]float32, n)
				for i := range x {
					x[i], g[i] = float32(rng.NormFloat64()*2+3), float32(rng.NormFloat64())
				}
				for i := range w {
					w[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
				}
				name := fmt.Sprintf("n=%d/rows=%d", n, rows)
				y, mean, rstd := make([]float32, rows*n), make([]float32, rows), make([]float32, rows)
				m.LayerNormRows(y, x, w, b, n, 1e-5, mean, rstd)
				dx := append([]float32(nil), g...) // written over grad
				dw, db := make([]float32, n), make([]float32, n)
				for j := range dw {
					dw[j], db[j] = 0.5, -0.25
				}
				m.LayerNormGradRows(dx, dx, x, w, dw, db, n, mean, rstd)

				wy, wdx := make([]float32, rows*n), make([]float32, rows*n)
				wdw, wdb := make([]float32, n), make([]float32, n)
				for j := range wdw {
					wdw[j], wdb[j] = 0.5, -0.25
				}
				for r := 0; r < rows; r++ {
					mr, rr := m.LayerNormRow(wy[r*n:][:n], x[r*n:][:n], w, b, 1e-5)
					if math.Float32bits(mr) != math.Float32bits(mean[r]) || math.Float32bits(rr) != math.Float32bits(rstd[r]) {
						t.Fatalf("%s: row %d statistics %v, %v, want %v, %v", name, r, mean[r], rstd[r], mr, rr)
					}
					m.LayerNormGradRow(wdx[r*n:][:n], g[r*n:][:n], x[r*n:][:n], w, wdw, wdb, mr, rr)
				}
				for what, pair := range map[string][2][]float32{"y": {y, wy}, "dx": {dx, wdx}, "dw": {dw, wdw}, "db": {db, wdb}} {
					for i := range pair[0] {
						if math.Float32bits(pair[0][i]) != math.Float32bits(pair[1][i]) {
							t.Fatalf("%s: %s[%d] = %v, want %v", name, what, i, pair[0][i], pair[1][i])
						}
					}
				}
			}
		}
	})
}
