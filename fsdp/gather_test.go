package fsdp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/nn"
)

// deepMLP is eight equal 64×64 layers: enough units that two of them are
// a small part of the model.
func deepMLP(rng *rand.Rand) *nn.Sequential {
	var layers []nn.Layer
	for range 8 {
		layers = append(layers, nn.NewLinear(rng, 64, 64, true), nn.ReLU{})
	}
	return nn.NewSequential(append(layers, nn.NewLinear(rng, 64, 10, true))...)
}

// TestBackwardRegather: the backward pass gathers every unit but the last
// two again (the forward pass overwrote them in the two slots), the peak
// of parameter memory over forward and backward is 1/N of the model plus
// the root and two units, nothing gathered is left after backward, and
// the parameters still equal one process's. With KeepAfterForward nothing
// is gathered again and the peak is the whole model.
func TestBackwardRegather(t *testing.T) {
	ws := []workload{gptWorkload(), imageWorkload("deep-mlp", deepMLP, []int{64})}
	for _, w := range ws {
		const steps = 2
		want := reference(t, w, steps)
		for _, world := range []int{2, 4} {
			for _, mode := range []string{"prefetch", "no-prefetch", "keep"} {
				prefetch, keep := mode != "no-prefetch", mode == "keep"
				t.Run(fmt.Sprintf("%s/world=%d/%s", w.name, world, mode), func(t *testing.T) {
					distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
						ctx := context.Background()
						mod := w.model()
						m, err := Wrap(ctx, mod, w.units(mod), pg, Options{Optimizer: adamW, NoPrefetch: !prefetch, KeepAfterForward: keep})
						if err != nil {
							t.Fatal(err)
						}
						defer m.Close()
						p := m.Plan()
						bytesOf := func(k int) int64 { return 4 * int64(p.Buckets[k].End-p.Buckets[k].Start) }
						nu := len(m.units) - 1
						root := bytesOf(len(p.Buckets) - 1)
						var all, maxUnit, total int64
						for k := range p.Buckets {
							all += bytesOf(k)
						}
						for u := range nu {
							maxUnit = max(maxUnit, bytesOf(m.bucketOfUnit(u)))
						}
						for _, np := range mod.NamedParameters() {
							total += 4 * int64(np.Param.Value.Len())
						}
						// Units 0 … nu−3 are gathered a second time;
						// kept, none is, and all are held at once.
						again, held := int64(0), 2*maxUnit
						for u := range nu - 2 {
							again += bytesOf(m.bucketOfUnit(u))
						}
						if keep {
							again, held = 0, all-root
						}
						shard := 4 * int64(p.ShardLen())
						n, r := pg.Size(), pg.Rank()
						for s := range steps {
							b := w.batch(mod, s, r*globalBatch/n, (r+1)*globalBatch/n)
							g0 := m.gatherBytes
							out, err := m.Call(ctx, b.units)
							if err != nil {
								t.Fatal(err)
							}
							if err := m.Backward(ctx, b.loss(out)); err != nil {
								t.Fatal(err)
							}
							if got := m.gatherBytes - g0; got != all+again {
								t.Errorf("rank %d step %d: gathered %d bytes, want the model (%d) and units 0..%d again (%d)", r, s, got, all, nu-3, again)
							}
							peak := m.PeakGatheredBytes()
							if limit := root + held; peak > limit {
								t.Errorf("rank %d step %d: peak gathered %d bytes, want ≤ root + two units (or all, kept) = %d", r, s, peak, limit)
							}
							if resident, limit := shard+peak, total/int64(n)+root+held+int64(len(p.Buckets)*16*n*4); resident > limit {
								t.Errorf("rank %d step %d: peak parameter bytes %d, want ≤ 1/N + root + two units = %d", r, s, resident, limit)
							}
							if mem := m.Memory(); mem.ParamBytes != shard {
								t.Errorf("rank %d step %d: %d parameter bytes after backward, want the shard's %d", r, s, mem.ParamBytes, shard)
							}
							if err := dptest.ClipStep(ctx, m, maxNorm); err != nil {
								t.Fatal(err)
							}
						}
						checkParams(t, ctx, m, mod, want, dptest.CompareNorms, fmt.Sprintf("rank %d: vs one process", r))
					})
				})
			}
		}
	}
}

// TestBackwardOfEarlierCall: a backward pass through the graph of a Call
// that is not the latest fails with an error instead of reading the
// parameters the later Call gathered.
func TestBackwardOfEarlierCall(t *testing.T) {
	w := gptWorkload()
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		mod := w.model()
		m, err := Wrap(ctx, mod, w.units(mod), pg, Options{Optimizer: adamW})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		lo := pg.Rank() * globalBatch / 2
		b := w.batch(mod, 0, lo, lo+6)
		first, err := m.Call(ctx, b.units)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Call(ctx, b.units); err != nil {
			t.Fatal(err)
		}
		err = m.Backward(ctx, b.loss(first))
		if err == nil {
			t.Fatal("backward through the first of two Calls' graphs: no error")
		}
		t.Logf("rank %d: %v", pg.Rank(), err)
	})
}
