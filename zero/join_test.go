package zero

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/nn"
)

// joinSteps is how many steps rank r trains in the uneven-input tests:
// rank 0 the most, each further rank one fewer.
func joinSteps(r int) int { return 4 - r }

// trainZeroJoin trains with zero inside Join on uneven data; clip selects
// whether the steps clip (the joined ranks learn it from the announcement).
func trainZeroJoin(ctx context.Context, w workload, pg distributed.ProcessGroup, o Options, clip bool) ([][]float32, error) {
	mod := w.model()
	o.Optimizer = adamW
	m, err := Wrap(ctx, mod, pg, o)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	err = m.Join(ctx, unevenLoop(ctx, w, mod, pg, m.Call, m.Backward, func() error {
		if clip {
			return dptest.ClipStep(ctx, m, maxNorm)
		}
		if err := m.Step(ctx); err != nil {
			return err
		}
		m.ZeroGrad()
		return nil
	}))
	return dptest.Params(mod), err
}

// unevenLoop is the training loop of rank r inside Join: joinSteps(r)
// steps of forward (call), backward and update.
func unevenLoop(ctx context.Context, w workload, mod nn.Module, pg distributed.ProcessGroup,
	call func(context.Context, func() *autograd.Var) (*autograd.Var, error),
	backward func(context.Context, *autograd.Var) error, update func() error) func() error {
	return func() error {
		n, r := pg.Size(), pg.Rank()
		for s := range joinSteps(r) {
			fwd, loss := w.batch(mod, s, r*globalBatch/n, (r+1)*globalBatch/n)
			out, err := call(ctx, fwd)
			if err != nil {
				return err
			}
			if err := backward(ctx, loss(out)); err != nil {
				return err
			}
			if err := update(); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestJoinErrors: a rank whose loop fails between steps makes the others
// fail naming it; ranks that disagree on clipping fail naming both.
func TestJoinErrors(t *testing.T) {
	w := workloads()[0]
	for _, tc := range []struct {
		name string
		// body is rank r's loop inside Join.
		body func(ctx context.Context, m *Model, mod nn.Module, r int) error
		want func(r int) string
	}{
		{"failed rank", func(ctx context.Context, m *Model, mod nn.Module, r int) error {
			if r == 1 {
				return fmt.Errorf("no data file")
			}
			fwd, _ := w.batch(mod, 0, 0, 6)
			_, err := m.Call(ctx, fwd)
			return err
		}, func(r int) string {
			if r == 0 {
				return "ranks [1] stopped training with an error"
			}
			return "no data file"
		}},
		{"disagreeing clip", func(ctx context.Context, m *Model, mod nn.Module, r int) error {
			fwd, loss := w.batch(mod, 0, r*6, r*6+6)
			out, err := m.Call(ctx, fwd)
			if err != nil {
				return err
			}
			if err := m.Backward(ctx, loss(out)); err != nil {
				return err
			}
			_, err = m.ClipGradNorm(ctx, float64(1+r), 2)
			return err
		}, func(int) string {
			return "zero: Join: ranks 0 and 1 disagree on the step: ClipGradNorm(1, 2) vs ClipGradNorm(2, 2)"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := context.Background()
				mod, m := wrapNew(t, ctx, w, pg, Options{Optimizer: adamW})
				defer m.Close()
				err := m.Join(ctx, func() error { return tc.body(ctx, m, mod, pg.Rank()) })
				if want := tc.want(pg.Rank()); err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("rank %d: Join: %v, want an error containing %q", pg.Rank(), err, want)
				}
			})
		})
	}
}
