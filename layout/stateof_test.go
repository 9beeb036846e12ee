package layout_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// TestFullStateDictOfRoundTrip gathers per-parameter tensors shaped like
// the shards (here: the shards' values plus 1, as an optimizer's state
// would be sharded) under several layouts, checks them against the full
// model, and scatters them back with LoadFullInto.
func TestFullStateDictOfRoundTrip(t *testing.T) {
	cfg := models.GPTConfig{Vocab: 256, Ctx: 8, NLayer: 4, D: 16, NHead: 2}
	for _, tc := range []struct {
		name  string
		world int
		c     layout.Config
	}{
		{"pp=2", 2, layout.Config{PP: 2}},
		{"tp=2", 2, layout.Config{TP: 2}},
		{"pp=2×tp=2/interleaved", 4, layout.Config{PP: 2, TP: 2, Schedule: "interleaved", Microbatches: 2}},
		{"dp=2×pp=2", 4, layout.Config{DP: 2, PP: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Batch, tc.c.SeqLen = 2, cfg.Ctx
			distributedtest.Run(t, tc.world, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, time.Minute)
				full, err := models.NewGPT(rand.New(rand.NewPCG(1, 0)), cfg)
				if err != nil {
					t.Fatal(err)
				}
				want := nn.StateDict(full)
				tr, err := layout.Build(ctx, pg, tc.c, full)
				if err != nil {
					t.Fatal(err)
				}
				defer tr.Close()
				var vals []*tensor.Tensor
				for _, p := range tr.Parameters() {
					v := p.Value.Clone()
					for i, x := range v.Data() {
						v.Data()[i] = x + 1
					}
					vals = append(vals, v)
				}
				got, err := tr.FullStateDictOf(ctx, vals)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("rank %d: %d tensors, want %d", pg.Rank(), len(got), len(want))
				}
				for name, w := range want {
					g := got[name]
					if g == nil || !g.SameShape(w) {
						t.Fatalf("rank %d: %s: got %v, want shape %v", pg.Rank(), name, g, w.Shape())
					}
					for i, x := range w.Contiguous().Data() {
						if g.Data()[i] != x+1 {
							t.Fatalf("rank %d: %s[%d] = %v, want %v", pg.Rank(), name, i, g.Data()[i], x+1)
						}
					}
				}
				back := make([]*tensor.Tensor, len(vals))
				for i, v := range vals {
					back[i] = tensor.New(v.Shape()...)
				}
				if err := tr.LoadFullInto(got, back); err != nil {
					t.Fatal(err)
				}
				for i := range vals {
					if fmt.Sprint(back[i].Data()) != fmt.Sprint(vals[i].Data()) {
						t.Errorf("rank %d: tensor %d did not come back from LoadFullInto", pg.Rank(), i)
					}
				}
				if err := tr.LoadFullInto(got, back[1:]); err == nil {
					t.Errorf("rank %d: LoadFullInto with a tensor missing: no error", pg.Rank())
				}
			})
		})
	}
}
