package ddp

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/dptest"
)

// gradsAfterOneStep wraps an MLP on every rank with o, runs one
// synchronised forward/backward on the rank's batch and returns every
// rank's parameter gradients.
func gradsAfterOneStep(t *testing.T, world int, o func() Options) [][][]float32 {
	t.Helper()
	data := newDataset(6, 100, 5, 12)
	out := make([][][]float32, world)
	errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
		ctx := context.Background()
		net, m, err := wrapMLP(ctx, pg, o())
		if err != nil {
			return err
		}
		if err := data.pass(ctx, m, pg.Rank()*4, pg.Rank()*4+4); err != nil {
			return err
		}
		for _, np := range net.NamedParameters() {
			out[pg.Rank()] = append(out[pg.Rank()], append([]float32(nil), np.Param.Grad.Data()...))
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

func TestCompressHook(t *testing.T) {
	tests := []struct {
		format HalfFormat
		gather bool
		relTol float64
	}{
		{FP16, false, 1.5e-3},
		{FP16, true, 1.5e-3},
		{BF16, false, 1.2e-2},
		{BF16, true, 1.2e-2},
	}
	for _, tt := range tests {
		for _, world := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%v/gather=%v/world=%d", tt.format, tt.gather, world), func(t *testing.T) {
				exact := gradsAfterOneStep(t, world, func() Options { return smallBuckets })
				got := gradsAfterOneStep(t, world, func() Options {
					o := smallBuckets
					o.Hook = &CompressHook{Format: tt.format, ViaAllGather: tt.gather}
					return o
				})
				dec, enc := distributed.FP16ToFloat32, distributed.FP16FromFloat32
				if tt.format == BF16 {
					dec, enc = distributed.BF16ToFloat32, distributed.BF16FromFloat32
				}
				var scale float64
				for _, g := range exact[0] {
					for _, v := range g {
						scale = math.Max(scale, math.Abs(float64(v)))
					}
				}
				rounded := 0
				for r := range got {
					for i := range got[r] {
						for j, v := range got[r][i] {
							w := exact[0][i][j]
							if d := math.Abs(float64(v - w)); d > tt.relTol*math.Abs(float64(w))+1e-3*scale {
								t.Fatalf("rank %d param %d elem %d: compressed %g, exact %g", r, i, j, v, w)
							}
							if v != got[0][i][j] {
								t.Fatalf("rank %d param %d elem %d: %g differs from rank 0's %g", r, i, j, v, got[0][i][j])
							}
							if v != w {
								rounded++
							}
							// Reducing in the format leaves representable values.
							if (!tt.gather || world == 1) && dec(enc(v)) != v {
								t.Fatalf("param %d elem %d: %g is not a %v value", i, j, v, tt.format)
							}
						}
					}
				}
				if rounded == 0 {
					t.Fatal("compressed gradients equal the exact ones: nothing was compressed")
				}
			})
		}
	}
}

// TestPowerSGDTraining runs PowerSGD end to end: replicas stay identical,
// training moves the parameters, step 0 is exact, later steps differ from
// exact all-reduce.
func TestPowerSGDTraining(t *testing.T) {
	for _, world := range []int{1, 2, 3} {
		for _, view := range []bool{false, true} {
			t.Run(fmt.Sprintf("world=%d/view=%v", world, view), func(t *testing.T) {
				c := mlpCfg()
				c.world, c.opt, c.steps = world, "sgd", 5
				models := make([]*Model, world)
				got := make([][][]float32, world)
				errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
					h, err := NewPowerSGD(PowerSGDOptions{Rank: 2, Seed: 3})
					if err != nil {
						return err
					}
					cc := c
					cc.opts = Options{Hook: h, GradientAsBucketView: view, FirstBucketCapBytes: 64, BucketCapBytes: 600}
					var m *Model
					got[pg.Rank()], m, err = cc.rank(pg)
					models[pg.Rank()] = m
					return err
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				init := dptest.Params(c.net(100))
				moved := 0.0
				for r := range got {
					for i := range got[r] {
						for j, v := range got[r][i] {
							if v != got[0][i][j] {
								t.Fatalf("rank %d param %d elem %d differs from rank 0", r, i, j)
							}
							moved = math.Max(moved, math.Abs(float64(v-init[i][j])))
						}
					}
				}
				if moved < 1e-3 {
					t.Fatalf("parameters moved by %g", moved)
				}
				exact := c
				exact.opts = Options{FirstBucketCapBytes: 64, BucketCapBytes: 600}
				want := exact.reference(t)
				differs := false
				for i := range want {
					for j := range want[i] {
						if math.Abs(float64(want[i][j]-got[0][i][j])) > 1e-4 {
							differs = true
						}
					}
				}
				if !differs {
					t.Fatal("PowerSGD training equals exact training: nothing was compressed")
				}
			})
		}
	}
}

// TestPowerSGDJoin: PowerSGD shadowing with zero gradients on joined ranks.
func TestPowerSGDJoin(t *testing.T) {
	c := mlpCfg()
	c.world, c.opt, c.steps = 3, "sgd", 5
	c.rankLen = func(r int) int { return []int{5, 2, 4}[r] }
	got := make([][][]float32, c.world)
	errs := runDist(t, c.world, func(pg distributed.ProcessGroup) error {
		h, err := NewPowerSGD(PowerSGDOptions{Seed: 1})
		if err != nil {
			return err
		}
		cc := c
		cc.opts = Options{Hook: h, FirstBucketCapBytes: 64, BucketCapBytes: 600}
		got[pg.Rank()], _, err = cc.rank(pg)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range got {
		for i := range got[r] {
			for j := range got[r][i] {
				if got[r][i][j] != got[0][i][j] {
					t.Fatalf("rank %d param %d differs from rank 0 after Join", r, i)
				}
			}
		}
	}
}
