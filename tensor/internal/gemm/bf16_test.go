package gemm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// nearestBF16 is an independent reference for BF16 on non-NaN values: of
// the two bfloat16 values around f (its truncation and the next one away
// from zero), the nearer in float64, ties to the even one.
func nearestBF16(f float32) uint16 {
	u := math.Float32bits(f)
	lo := uint16(u >> 16)
	if u&0xffff == 0 {
		return lo
	}
	hi := lo + 1 // the next magnitude, same sign (0x7f7f+1 is Inf)
	dl := math.Abs(float64(F32(lo)) - float64(f))
	dh := math.Abs(float64(F32(hi)) - float64(f))
	if math.IsInf(float64(F32(hi)), 0) {
		// Overflow: round as if the exponent range went on (IEEE 754).
		dh = math.Abs(0x1p128 - math.Abs(float64(f)))
	}
	switch {
	case dl < dh:
		return lo
	case dh < dl:
		return hi
	case lo&1 == 0:
		return lo
	}
	return hi
}

// bf16Specials are the values every conversion path must get right: signed
// zeros and infinities, quiet and signalling NaNs (with payloads only in
// the low half), subnormals (the smallest, the largest, ties), ties to
// even either way, and overflow by rounding.
var bf16Specials = []uint32{
	0x00000000, 0x80000000, 0x7f800000, 0xff800000,
	0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7fa00000, 0xffffffff,
	0x00000001, 0x80000001, 0x00007fff, 0x00008000, 0x00008001, 0x00018000, 0x007fffff, 0x807fffff, 0x007f8000, 0x00400000,
	0x3f808000, 0x3f818000, 0xbf808000, 0x3f807fff, 0x3f808001, 0x3f800000,
	0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0xff7f8000, 0x7f7e8000, 0x00800000, 0x00807fff, 0x00808000,
}

func TestBF16Reference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	check := func(u uint32) {
		f := math.Float32frombits(u)
		got := BF16(f)
		if f != f {
			if F32(got) == F32(got) || got&0x40 == 0 || got>>15 != uint16(u>>31) {
				t.Errorf("BF16(%#08x) = %#04x, want a quiet NaN of the same sign", u, got)
			}
			return
		}
		if want := nearestBF16(f); got != want {
			t.Errorf("BF16(%#08x) = %#04x, want %#04x", u, got, want)
		}
	}
	for _, u := range bf16Specials {
		check(u)
	}
	for range 200000 {
		check(rng.Uint32())
	}
}

// cvtPaths returns the conversion paths this CPU runs: each kernel's
// (Kernels), and VCVTNE2PS2BF16's where the CPU has it.
func cvtPaths() []int {
	cvtOf := map[string]int{KernelGo: cvtGo, KernelAVX2: cvtAVX2, KernelAVX512: cvtAVX512}
	var ps []int
	for _, k := range Kernels() {
		ps = append(ps, cvtOf[k])
	}
	if hasAVX512BF16() {
		ps = append(ps, cvtAVX512BF16)
	}
	return ps
}

// TestBF16Conversions checks every path against BF16 and F32 bit for bit:
// the specials at every position of a 32-value group (a subnormal in a
// group sends the AVX512-BF16 path to its integer rounding), random bit
// patterns, lengths around the vector width, and all 65,536 bfloat16
// values widened.
func TestBF16Conversions(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, path := range cvtPaths() {
		g := &Impl{cvt: path}
		t.Run("cvt="+[]string{"go", "avx2", "avx512", "avx512bf16"}[path], func(t *testing.T) {
			var inputs [][]float32
			for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 48, 64, 95, 1000} {
				s := make([]float32, n)
				for i := range s {
					s[i] = math.Float32frombits(rng.Uint32())
				}
				inputs = append(inputs, s)
			}
			for shift := 0; shift < 32; shift += 5 {
				s := make([]float32, 96)
				for i := range s {
					s[i] = 2*rng.Float32() - 1
				}
				for i, u := range bf16Specials {
					s[(i*3+shift)%len(s)] = math.Float32frombits(u)
				}
				inputs = append(inputs, s)
			}
			clean := make([]float32, 256) // no subnormal: the fast path
			for i := range clean {
				clean[i] = float32(rng.NormFloat64())
			}
			inputs = append(inputs, clean)
			for _, src := range inputs {
				dst := make([]uint16, len(src)+1)
				dst[len(src)] = 0xbeef
				g.ToBF16(dst, src)
				for i, f := range src {
					if want := BF16(f); dst[i] != want {
						t.Fatalf("n=%d: ToBF16[%d] of %#08x = %#04x, want %#04x", len(src), i, math.Float32bits(f), dst[i], want)
					}
				}
				if dst[len(src)] != 0xbeef {
					t.Fatalf("n=%d: ToBF16 wrote past len(src)", len(src))
				}
			}
			all := make([]uint16, 1<<16)
			for i := range all {
				all[i] = uint16(i)
			}
			wide := make([]float32, len(all))
			g.FromBF16(wide, all)
			for i, f := range wide {
				if math.Float32bits(f) != uint32(i)<<16 {
					t.Fatalf("FromBF16(%#04x) = %#08x, want %#08x", i, math.Float32bits(f), uint32(i)<<16)
				}
			}
		})
	}
}

// TestPackBF16 checks the pair-interleaved packing against its contract on
// both layouts, with odd kc and partial slivers, through packBF16 (its
// AVX-512 packers where they apply) and packBF16Go.
func TestPackBF16(t *testing.T) {
	for _, pack := range []func(dst []uint32, src []uint16, ld int, rowsAlongN bool, n, kc, w int){packBF16, packBF16Go} {
		testPackBF16(t, pack)
	}
}

func testPackBF16(t *testing.T, pack func(dst []uint32, src []uint16, ld int, rowsAlongN bool, n, kc, w int)) {
	for _, rowsAlongN := range []bool{false, true} {
		for _, c := range []struct{ n, kc, w, ld int }{{5, 7, 4, 9}, {14, 8, 14, 20}, {33, 3, 32, 40}, {1, 1, 14, 1}, {14, 9, 14, 12}, {40, 5, 32, 48}, {20, 6, 14, 6}} {
			src := make([]uint16, c.ld*max(c.n, c.kc))
			for i := range src {
				src[i] = uint16(i + 1)
			}
			k2 := (c.kc + 1) / 2
			slivers := (c.n + c.w - 1) / c.w
			dst := make([]uint32, slivers*c.w*k2)
			for i := range dst {
				dst[i] = 0xdeadbeef
			}
			pack(dst, src, c.ld, rowsAlongN, c.n, c.kc, c.w)
			for s := 0; s < slivers; s++ {
				for q := 0; q < k2; q++ {
					for r := 0; r < c.w; r++ {
						for e := 0; e < 2; e++ {
							i, p := s*c.w+r, 2*q+e
							var want uint16
							if i < c.n && p < c.kc {
								if rowsAlongN {
									want = src[i*c.ld+p]
								} else {
									want = src[p*c.ld+i]
								}
							}
							if got := uint16(dst[s*c.w*k2+q*c.w+r] >> (16 * e)); got != want {
								t.Fatalf("rowsAlongN=%v %+v: X(%d,%d) packed as %d, want %d", rowsAlongN, c, i, p, got, want)
							}
						}
					}
				}
			}
		}
	}
}
