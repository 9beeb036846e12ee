package tensor

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/cohortml/cohort/tensor/internal/vec"
	"github.com/cohortml/cohort/tensor/tensortest"
)

// naiveConv computes the convolution and, given dy, its three gradients by
// direct loops over the definition.
func naiveConv(x, w, b, dy *Tensor, s, p int) (y, dx, dw, db []float32) {
	N, C, H, W := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3)
	O, KH, KW := w.Dim(0), w.Dim(2), w.Dim(3)
	OH, OW := (H+2*p-KH)/s+1, (W+2*p-KW)/s+1
	y = make([]float32, N*O*OH*OW)
	dx64, dw64, db64 := make([]float64, x.Len()), make([]float64, w.Len()), make([]float64, O)
	defer func() { dx, dw, db = to32(dx64), to32(dw64), to32(db64) }()
	for n := 0; n < N; n++ {
		for o := 0; o < O; o++ {
			for oh := 0; oh < OH; oh++ {
				for ow := 0; ow < OW; ow++ {
					acc := float64(b.At(o))
					g := float64(dy.At(n, o, oh, ow))
					db64[o] += g
					for c := 0; c < C; c++ {
						for i := 0; i < KH; i++ {
							for j := 0; j < KW; j++ {
								ih, iw := oh*s-p+i, ow*s-p+j
								if ih < 0 || ih >= H || iw < 0 || iw >= W {
									continue
								}
								acc += float64(x.At(n, c, ih, iw)) * float64(w.At(o, c, i, j))
								dx64[((n*C+c)*H+ih)*W+iw] += g * float64(w.At(o, c, i, j))
								dw64[((o*C+c)*KH+i)*KW+j] += g * float64(x.At(n, c, ih, iw))
							}
						}
					}
					y[((n*O+o)*OH+oh)*OW+ow] = float32(acc)
				}
			}
		}
	}
	return y, dx, dw, db
}

func to32(a []float64) []float32 {
	out := make([]float32, len(a))
	for i, v := range a {
		out[i] = float32(v)
	}
	return out
}

// Permute4 moves the channel dimension of [N, O, H, W] first: [O, N, H, W].
func Permute4(t *Tensor) *Tensor { return t.Permute(1, 0, 2, 3).Contiguous() }

func TestConv2d(t *testing.T) { convPaths(t, testConv2d) }

func testConv2d(t *testing.T) {
	rng := newRNG(6)
	cases := []struct{ N, C, H, W, O, K, S, P int }{
		{2, 1, 6, 6, 3, 3, 1, 0},
		{1, 2, 7, 5, 4, 3, 2, 1},
		{2, 3, 8, 8, 2, 5, 1, 2},
		{1, 4, 5, 5, 2, 1, 1, 0},
		{2, 2, 9, 7, 3, 3, 3, 2},
		{1, 1, 2, 2, 1, 3, 1, 1},
		{40, 2, 6, 6, 2, 3, 1, 1},  // several samples per GEMM chunk, with a partial last chunk
		{3, 1, 30, 40, 2, 5, 1, 2}, // one sample per chunk
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			x := randT(rng, c.N, c.C, c.H, c.W)
			w := randT(rng, c.O, c.C, c.K, c.K)
			b := randT(rng, c.O)
			y := Conv2d(x, w, b, c.S, c.P)
			dy := randT(rng, y.Shape()...)
			wy, wdx, wdw, wdb := naiveConv(x, w, b, dy, c.S, c.P)
			assertClose(t, "y", y.Data(), wy, 1e-5)
			dx, dw, db := Conv2dBackward(dy, x, w, c.S, c.P, true)
			assertClose(t, "dx", dx.Data(), wdx, 1e-5)
			// dw sums N·OH·OW float32 products (1200 per sample in the
			// largest case), whose rounding depends on the GEMM's order.
			assertClose(t, "dw", dw.Data(), wdw, 1e-4)
			assertClose(t, "db", db.Data(), wdb, 1e-5)
			// The whole-batch unfold and fold agree with the chunked kernels.
			g := NewConvGeom("test", x.Shape(), c.K, c.K, c.S, c.P)
			col := Im2Col(x, g)
			y2 := MatMul(w.Reshape(c.O, -1), col) // [O, N·L]
			assertClose(t, "im2col product", y2.Reshape(c.O, c.N, -1).Permute(1, 0, 2).Contiguous().Data(),
				Sub(y, b.Reshape(1, c.O, 1, 1)).Data(), 1e-5)
			dcol := MatMul(w.Reshape(c.O, -1).T(), Permute4(dy).Reshape(c.O, -1))
			dx2 := New(x.Shape()...)
			Col2ImAdd(dx2, dcol, g)
			assertClose(t, "col2im", dx2.Data(), wdx, 1e-5)
			if dx3, _, _ := Conv2dBackward(dy, x, w, c.S, c.P, false); dx3 != nil {
				t.Errorf("dx computed without needInput")
			}
		})
	}
	t.Run("strided_input", func(t *testing.T) {
		x := randT(rng, 2, 5, 5, 3).Permute(0, 3, 1, 2) // NHWC storage viewed as NCHW
		w, b := randT(rng, 2, 3, 3, 3), randT(rng, 2)
		y := Conv2d(x, w, b, 1, 1)
		wy, _, _, _ := naiveConv(x, w, b, New(y.Shape()...), 1, 1)
		assertClose(t, "y", y.Data(), wy, 1e-5)
	})
	mustPanic(t, func() { Conv2d(New(1, 2, 5, 5), New(3, 4, 3, 3), nil, 1, 0) }, "tensor: Conv2d", "[1 2 5 5]", "[3 4 3 3]")
	mustPanic(t, func() { Conv2d(New(1, 2, 2, 2), New(3, 2, 5, 5), nil, 1, 0) }, "Conv2d", "larger")
	mustPanic(t, func() { Conv2d(New(2, 5, 5), New(3, 2, 3, 3), nil, 1, 0) }, "Conv2d", "[2 5 5]")
}

func TestPool(t *testing.T) {
	rng := newRNG(7)
	for _, c := range []struct{ K, S, P, H, W int }{
		{2, 2, 0, 7, 6}, {3, 1, 0, 7, 6}, {3, 2, 0, 7, 6}, {3, 2, 1, 7, 6}, {2, 1, 1, 7, 6},
		{2, 2, 0, 17, 21}, {2, 2, 0, 9, 10}, {2, 2, 0, 28, 28}, // 2×2 rows of 8+ and 4–7 windows
	} {
		t.Run(fmt.Sprintf("k%ds%dp%d_%dx%d", c.K, c.S, c.P, c.H, c.W), func(t *testing.T) {
			x := randT(rng, 2, 2, c.H, c.W)
			if c.H == 9 {
				x.Data()[3] = float32(math.NaN()) // a NaN wins its window
				x.Data()[20], x.Data()[21] = 5, 5 // a tie: the first wins
			}
			g := NewConvGeom("test", x.Shape(), c.K, c.K, c.S, c.P)
			ymax, arg := MaxPool2d(x, c.K, c.S, c.P)
			yavg := AvgPool2d(x, c.K, c.S, c.P)
			dy := randT(rng, ymax.Shape()...)
			var wmax, wavg []float32
			wdmax, wdavg := make([]float32, x.Len()), make([]float32, x.Len())
			tensortest.ForEachIndex(ymax.Shape(), func(idx []int) {
				n, ch, oh, ow := idx[0], idx[1], idx[2], idx[3]
				best, bi := math.Inf(-1), -1
				var sum float64
				for i := 0; i < c.K; i++ {
					for j := 0; j < c.K; j++ {
						h, w := oh*c.S-c.P+i, ow*c.S-c.P+j
						if h < 0 || h >= g.H || w < 0 || w >= g.W {
							continue
						}
						v := float64(x.At(n, ch, h, w))
						sum += v
						if v > best || math.IsNaN(v) {
							best, bi = v, ((n*g.C+ch)*g.H+h)*g.W+w
						}
					}
				}
				wmax = append(wmax, float32(best))
				wavg = append(wavg, float32(sum/float64(c.K*c.K)))
				gv := dy.At(idx...)
				wdmax[bi] += gv
				for i := 0; i < c.K; i++ {
					for j := 0; j < c.K; j++ {
						h, w := oh*c.S-c.P+i, ow*c.S-c.P+j
						if h >= 0 && h < g.H && w >= 0 && w < g.W {
							wdavg[((n*g.C+ch)*g.H+h)*g.W+w] += gv / float32(c.K*c.K)
						}
					}
				}
			})
			assertClose(t, "max", ymax.Data(), wmax, 0)
			assertClose(t, "avg", yavg.Data(), wavg, 1e-6)
			assertClose(t, "dmax", MaxPool2dBackward(dy, arg, x.Shape()).Data(), wdmax, 1e-6)
			assertClose(t, "davg", AvgPool2dBackward(dy, x.Shape(), c.K, c.S, c.P).Data(), wdavg, 1e-6)
		})
	}
	mustPanic(t, func() { MaxPool2d(New(1, 1, 4, 4), 2, 0, 0) }, "MaxPool2d", "stride 0")
}

func BenchmarkPool(b *testing.B) {
	x := randT(newRNG(1), 64, 6, 28, 28)
	b.Run("max_k2s2", func(b *testing.B) {
		for b.Loop() {
			MaxPool2d(x, 2, 2, 0)
		}
	})
	b.Run("avg_k2s2", func(b *testing.B) {
		for b.Loop() {
			AvgPool2d(x, 2, 2, 0)
		}
	})
}

// TestConv2dRandom checks both convolution paths (stride 1 and strided),
// with and without the fused ReLU, against the direct loops on random
// geometries, including 1×1 planes, kernels as large as the padded input
// and batches that span several GEMM chunks.
func TestConv2dRandom(t *testing.T) { convPaths(t, testConv2dRandom) }

// convPaths runs f with the direct stride-1 tiles and, where the CPU has
// them, without: the unfolding and GEMM everywhere.
func convPaths(t *testing.T, f func(t *testing.T)) {
	saved := useConvTiles
	defer func() { useConvTiles = saved }()
	useConvTiles = func() bool { return false }
	t.Run("unfold", f)
	if vec.HasConvTiles() {
		useConvTiles = func() bool { return true }
		t.Run("direct", f)
	}
}

func testConv2dRandom(t *testing.T) {
	rng := newRNG(16)
	for i := range 60 {
		N, C, O := 1+rng.IntN(4), 1+rng.IntN(4), 1+rng.IntN(7)
		P, S := rng.IntN(3), 1+rng.IntN(3)
		if i%2 == 0 {
			S = 1
		}
		H, W := 1+rng.IntN(11), 1+rng.IntN(11)
		K := 1 + rng.IntN(min(H, W)+2*P)
		if i%10 == 0 {
			N = 40 + rng.IntN(30) // several chunks, a partial last one
		}
		relu := i%3 == 0
		t.Run(fmt.Sprintf("n%d_c%d_%dx%d_o%d_k%d_s%d_p%d_relu%v", N, C, H, W, O, K, S, P, relu), func(t *testing.T) {
			x := randT(rng, N, C, H, W)
			w := randT(rng, O, C, K, K)
			b := randT(rng, O)
			var y *Tensor
			if relu {
				y = Conv2dReLU(x, w, b, S, P)
			} else {
				y = Conv2d(x, w, b, S, P)
			}
			dy := randT(rng, y.Shape()...)
			wy, _, _, _ := naiveConv(x, w, b, New(y.Shape()...), S, P)
			if relu {
				for j, v := range wy {
					wy[j] = max(v, 0)
				}
				// The gradient flows where the output is positive.
				for j, v := range y.Data() {
					if v <= 0 {
						dy.Data()[j] = 0
					}
				}
			}
			assertClose(t, "y", y.Data(), wy, 1e-5)
			_, wdx, wdw, wdb := naiveConv(x, w, b, dy, S, P)
			var dx, dw, db *Tensor
			if relu {
				// Pass the unmasked gradient: the op masks it itself.
				raw := randT(rng, y.Shape()...)
				for j, v := range y.Data() {
					if v > 0 {
						raw.Data()[j] = dy.Data()[j]
					}
				}
				dx, dw, db = Conv2dReLUBackward(raw, y, x, w, S, P, true)
			} else {
				dx, dw, db = Conv2dBackward(dy, x, w, S, P, true)
			}
			assertClose(t, "dx", dx.Data(), wdx, 1e-4)
			assertClose(t, "dw", dw.Data(), wdw, 1e-4)
			assertClose(t, "db", db.Data(), wdb, 1e-5)
		})
	}
}

// BenchmarkConv2d measures the anchor LeNet's two convolution blocks
// (convolution, ReLU and 2×2 max pooling fused) at batch 64, forward and
// backward, through the direct tiles (where the CPU has them) and the
// unfolding, reporting the convolution's GFLOP/s.
func BenchmarkConv2d(b *testing.B) {
	// A training process keeps its data set resident (the anchor's is
	// 188 MB), which spaces garbage collections far apart; without it, the
	// ops' output allocations would make the collector and page faults
	// dominate the measurement.
	heap := make([]float32, 48<<20)
	defer runtime.KeepAlive(heap)
	rng := newRNG(1)
	for _, c := range []struct {
		name                string
		N, C, H, W, O, K, P int
	}{
		{"lenet1_64x1x28x28_o6_k5_p2", 64, 1, 28, 28, 6, 5, 2},
		{"lenet2_64x6x14x14_o16_k5", 64, 6, 14, 14, 16, 5, 0},
	} {
		x := randT(rng, c.N, c.C, c.H, c.W)
		w, bias := randT(rng, c.O, c.C, c.K, c.K), randT(rng, c.O)
		y, arg := Conv2dReLUMaxPool2d(x, w, bias, 1, c.P, 2)
		dy := randT(rng, y.Shape()...)
		g := NewConvGeom("bench", x.Shape(), c.K, c.K, 1, c.P)
		flops := 2 * float64(c.N*c.O*g.OH*g.OW) * float64(c.C*c.K*c.K)
		for _, path := range []string{"direct", "unfold"} {
			if path == "direct" && !vec.HasConvTiles() {
				continue
			}
			saved := useConvTiles
			useConvTiles = func() bool { return path == "direct" }
			b.Run(c.name+"/"+path+"/forward", func(b *testing.B) {
				for b.Loop() {
					Conv2dReLUMaxPool2d(x, w, bias, 1, c.P, 2)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
			b.Run(c.name+"/"+path+"/backward", func(b *testing.B) {
				for b.Loop() {
					Conv2dReLUMaxPool2dBackward(dy, y, arg, x, w, 1, c.P, 2, c.C > 1)
				}
				passes := 1.0 // the weight gradient; the input gradient when C > 1
				if c.C > 1 {
					passes = 2
				}
				b.ReportMetric(passes*flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
			useConvTiles = saved
		}
	}
}

// TestConv2dReLUMaxPool2d checks the fused block against the unfused ops
// (Conv2dReLU, MaxPool2d and their backward passes) on random geometries:
// equal values and indices, equal gradients.
func TestConv2dReLUMaxPool2d(t *testing.T) { convPaths(t, testConv2dReLUMaxPool2d) }

func testConv2dReLUMaxPool2d(t *testing.T) {
	rng := newRNG(17)
	for i := range 40 {
		N, C, O := 1+rng.IntN(4), 1+rng.IntN(3), 1+rng.IntN(7)
		P, S, k := rng.IntN(3), 1+rng.IntN(2), 1+rng.IntN(3)
		if i%2 == 0 {
			S, k = 1, 2
		}
		H, W := 1+rng.IntN(12), 1+rng.IntN(12)
		K := 1 + rng.IntN(min(H, W)+2*P)
		if i%8 == 0 {
			N = 30 + rng.IntN(20)
		}
		if g := NewConvGeom("test", []int{N, C, H, W}, K, K, S, P); k > min(g.OH, g.OW) {
			k = 1 // MaxPool2d needs the window to fit
		}
		t.Run(fmt.Sprintf("n%d_c%d_%dx%d_o%d_k%d_s%d_p%d_pool%d", N, C, H, W, O, K, S, P, k), func(t *testing.T) {
			x := randT(rng, N, C, H, W)
			w := randT(rng, O, C, K, K)
			b := randT(rng, O)
			if i%5 == 0 {
				b = nil
			}
			y, arg := Conv2dReLUMaxPool2d(x, w, b, S, P, k)
			c := Conv2dReLU(x, w, b, S, P)
			wy, warg := MaxPool2d(c, k, k, 0)
			assertClose(t, "y", y.Data(), wy.Data(), 0)
			if len(arg) != len(warg) {
				t.Fatalf("%d indices, want %d", len(arg), len(warg))
			}
			for j := range arg {
				if arg[j] != warg[j] && y.Data()[j] > 0 {
					t.Fatalf("index %d = %d, want %d", j, arg[j], warg[j])
				}
			}
			dy := randT(rng, y.Shape()...)
			dx, dw, db := Conv2dReLUMaxPool2dBackward(dy, y, arg, x, w, S, P, k, true)
			wdx, wdw, wdb := Conv2dReLUBackward(MaxPool2dBackward(dy, warg, c.Shape()), c, x, w, S, P, true)
			assertClose(t, "dx", dx.Data(), wdx.Data(), 1e-6)
			assertClose(t, "dw", dw.Data(), wdw.Data(), 1e-6)
			assertClose(t, "db", db.Data(), wdb.Data(), 1e-6)
			if dx, _, _ := Conv2dReLUMaxPool2dBackward(dy, y, arg, x, w, S, P, k, false); dx != nil {
				t.Errorf("dx computed without needInput")
			}
		})
	}
	mustPanic(t, func() { Conv2dReLUMaxPool2d(New(1, 1, 4, 4), New(1, 1, 3, 3), nil, 1, 0, 0) }, "tensor: Conv2dReLUMaxPool2d", "pool 0")
	mustPanic(t, func() { Conv2dReLUMaxPool2d(New(1, 1, 4, 4), New(1, 1, 3, 3), nil, 1, 0, 3) }, "tensor: Conv2dReLUMaxPool2d", "pool 3", "2x2")
	mustPanic(t, func() {
		y, arg := Conv2dReLUMaxPool2d(New(1, 1, 6, 6), New(2, 1, 3, 3), nil, 1, 0, 2)
		Conv2dReLUMaxPool2dBackward(New(1, 2, 3, 3), y, arg, New(1, 1, 6, 6), New(2, 1, 3, 3), 1, 0, 2, true)
	}, "Conv2dReLUMaxPool2dBackward", "[1 2 3 3]", "[1 2 2 2]")
}
