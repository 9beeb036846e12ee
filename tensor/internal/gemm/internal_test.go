package gemm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func kernels() []string { return Kernels() }

// TestPackers compares each kernel's packing routines with the portable
// ones, including the zero padding of partial slivers.
func TestPackers(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kern := range kernels() {
		g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: 1})
		for _, ar := range []*arch{g.arch, g.wide} {
			if ar == nil {
				continue
			}
			kern := fmt.Sprintf("%s%dx%d", kern, ar.mr, ar.nr)
			for _, trans := range []bool{false, true} {
				for _, dims := range [][2]int{{1, 1}, {3, 5}, {ar.mr, 16}, {ar.mr + 1, 17}, {2*ar.mr - 1, 33}, {ar.nr, 40}, {ar.nr + 3, 9}, {70, 64}} {
					n, kc := dims[0], dims[1]
					t.Run(fmt.Sprintf("kernel=%s/trans=%v/n=%d/kc=%d", kern, trans, n, kc), func(t *testing.T) {
						for _, side := range []string{"A", "B"} {
							w := ar.mr
							if side == "B" {
								w = ar.nr
							}
							// Source: for A, n rows of op(A) × kc; for B, kc × n of op(B).
							rowsAlongN := (side == "A") != trans
							rows, cols := n, kc
							if !rowsAlongN {
								rows, cols = kc, n
							}
							ld := cols + 3
							src := make([]float32, (rows-1)*ld+cols)
							for i := range src {
								src[i] = rng.Float32()
							}
							size := (n+w-1)/w*w*kc + ar.slack
							want := make([]float32, size)
							packGo(want, src, ld, rowsAlongN, n, kc, w)
							got := make([]float32, size)
							for i := range got {
								got[i] = -1 // must be overwritten
							}
							if side == "A" {
								ar.packA(got, src, ld, trans, n, kc)
							} else {
								ar.packB(got, src, ld, trans, kc, n)
							}
							packed := (n + w - 1) / w * w * kc
							if !slices.Equal(got[:packed], want[:packed]) {
								for i := range packed {
									if got[i] != want[i] {
										t.Fatalf("pack%s: element %d (sliver %d, p %d, lane %d) = %v, want %v",
											side, i, i/(w*kc), i%(w*kc)/w, i%w, got[i], want[i])
									}
								}
							}
						}
					})
				}
			}
		}
	}
}

func TestPick(t *testing.T) {
	if !hasAVX512() {
		t.Skip("no AVX-512: one kernel family only")
	}
	g := MustNew(t, Options{BLAS: BLASGo, Kernel: KernelAVX512})
	for _, tc := range []struct {
		m, n   int
		wantMR int
	}{
		{64, 10, 14},    // few columns
		{6, 25, 14},     // few columns
		{6, 50176, 6},   // conv1 forward
		{16, 6400, 6},   // conv2 forward
		{64, 1024, 6},   // MLP forward
		{14, 1024, 14},  // exact 14-row tile
		{1024, 1024, 6}, // square
		{28, 64, 14},    // 28 = 2×14 rows, 30 = 5×6 pads more
	} {
		if got := g.pick(tc.m, tc.n).mr; got != tc.wantMR {
			t.Errorf("pick(m=%d, n=%d) chose the %d-row kernel, want %d", tc.m, tc.n, got, tc.wantMR)
		}
	}
}

func TestPartition(t *testing.T) {
	for _, tc := range []struct {
		name             string
		m, n, k, threads int
		tm, tn           int
	}{
		{"tiny stays serial", 8, 8, 8, 4, 1, 1},
		{"wide splits n", 64, 1024, 784, 2, 1, 2},
		{"tall splits m", 1024, 64, 1024, 2, 2, 1},
		{"square 4 threads", 1024, 1024, 1024, 4, 2, 2},
		{"one row cannot split m", 1, 4096, 4096, 2, 1, 2},
		{"three threads", 512, 2048, 512, 3, 1, 3},
		{"work caps threads", 128, 64, 300, 8, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm, tn := partition(tc.m, tc.n, tc.k, tc.threads, 14, 32)
			if tm != tc.tm || tn != tc.tn {
				t.Errorf("partition(%d, %d, %d, threads=%d) = %d×%d, want %d×%d", tc.m, tc.n, tc.k, tc.threads, tm, tn, tc.tm, tc.tn)
			}
		})
	}
}
