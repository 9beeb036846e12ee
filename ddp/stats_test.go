package ddp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
)

func TestStats(t *testing.T) {
	const world, steps, local = 2, 3, 2
	stats := make([]Stats, world)
	reset := make([]Stats, world)
	errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
		ctx := context.Background()
		net := newMLP(1, 12, 16, 16, 5)
		m, err := Wrap(ctx, net, pg, smallBuckets)
		if err != nil {
			return err
		}
		data := newDataset(1, 100, 5, 12)
		step := func(s int) error {
			return data.pass(ctx, m, s*2, s*2+2)
		}
		for s := 0; s < steps; s++ {
			if err := step(s); err != nil {
				return err
			}
		}
		for s := 0; s < local; s++ {
			if err := m.NoSync(func() error { return step(s) }); err != nil {
				return err
			}
		}
		stats[pg.Rank()] = m.Stats()
		m.ResetStats()
		reset[pg.Rank()] = m.Stats()
		return nil
	})
	var gradBytes int64
	for _, np := range newMLP(1, 12, 16, 16, 5).NamedParameters() {
		gradBytes += int64(np.Param.Value.Len()) * 4
	}
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		s := stats[r]
		if s.Steps != steps || s.LocalSteps != local {
			t.Fatalf("rank %d: %d steps, %d local, want %d and %d", r, s.Steps, s.LocalSteps, steps, local)
		}
		if s.Bytes != steps*gradBytes {
			t.Fatalf("rank %d: %d bytes reduced, want %d", r, s.Bytes, steps*gradBytes)
		}
		if s.Forward <= 0 || s.Backward <= 0 || s.Busy <= 0 || s.Comm != s.Busy || s.Exposed < 0 || s.Hidden < 0 || s.Hidden > s.Busy {
			t.Fatalf("rank %d: implausible stats %+v", r, s)
		}
		if f := s.HiddenFraction(); f < 0 || f > 1 {
			t.Fatalf("rank %d: hidden fraction %g", r, f)
		}
		if s.Compute() != s.Forward+s.Backward {
			t.Fatalf("rank %d: Compute %v", r, s.Compute())
		}
		if str := s.String(); !strings.Contains(str, "3 steps (+2 local)") || !strings.Contains(str, "% hidden") {
			t.Fatalf("rank %d: String() = %q", r, str)
		}
		if reset[r] != (Stats{}) {
			t.Fatalf("rank %d: after ResetStats %+v", r, reset[r])
		}
	}
}

// TestRebuildFollowsReadyOrder registers the layers in the reverse of
// their use, so the initial plan (reverse registration order) is wrong;
// after the first step the buckets must follow the order in which the
// gradients actually became ready, on every rank.
func TestRebuildFollowsReadyOrder(t *testing.T) {
	const world = 2
	plans := make([][]Plan, world)
	observed := make([][]int, world)
	errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
		ctx := context.Background()
		rng := rngFor(3)
		net := &testNet{train: true}
		// Registered: out layer first, then hidden; used: hidden then out.
		w2 := net.param(rng, "out.weight", 0.3, 3, 6)
		b2 := net.param(rng, "out.bias", 0.1, 3)
		w1 := net.param(rng, "hidden.weight", 0.3, 6, 4)
		b1 := net.param(rng, "hidden.bias", 0.1, 6)
		net.stages = append(net.stages, func(x *autograd.Var) *autograd.Var {
			return autograd.Linear(autograd.ReLU(autograd.Linear(x, w1, b1)), w2, b2)
		})
		var order []int
		for i, np := range net.NamedParameters() {
			np.Param.OnGradReady(func(*autograd.Var) { order = append(order, i) })
		}
		m, err := Wrap(ctx, net, pg, Options{FirstBucketCapBytes: 8, BucketCapBytes: 8})
		if err != nil {
			return err
		}
		opt, _ := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: 0.1}}, optim.SGDOptions{})
		data := newDataset(1, 20, 3, 4)
		plans[pg.Rank()] = append(plans[pg.Rank()], m.Plan())
		for s := 0; s < 2; s++ {
			if err := data.pass(ctx, m, s*2, s*2+2); err != nil {
				return err
			}
			opt.Step()
			opt.ZeroGrad()
			plans[pg.Rank()] = append(plans[pg.Rank()], m.Plan())
			if s == 0 {
				observed[pg.Rank()] = order
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	flat := func(p Plan) []int {
		var o []int
		for _, b := range p.Buckets {
			o = append(o, b.Params...)
		}
		return o
	}
	if got := flat(plans[0][0]); !slices.Equal(got, []int{3, 2, 1, 0}) {
		t.Fatalf("initial plan order %v, want reverse registration [3 2 1 0]", got)
	}
	if len(observed[0]) != 4 || observed[0][0] > 1 {
		t.Fatalf("observed ready order %v: the out layer (0, 1) should be ready first", observed[0])
	}
	for r := 0; r < world; r++ {
		if got := flat(plans[r][1]); !slices.Equal(got, observed[0]) {
			t.Fatalf("rank %d: rebuilt plan order %v, want rank 0's ready order %v", r, got, observed[0])
		}
		if got := flat(plans[r][2]); !slices.Equal(got, observed[0]) {
			t.Fatalf("rank %d: plan changed again after step 2: %v", r, got)
		}
	}
}

// TestBucketViewsAligned: in bucket-view mode every gradient starts on a
// 64-byte boundary, before and after the rebuild.
func TestBucketViewsAligned(t *testing.T) {
	errs := runDist(t, 1, func(pg distributed.ProcessGroup) error {
		ctx := context.Background()
		net := newMLP(1, 12, 17, 5, 3) // odd sizes: unpadded slots would be misaligned
		m, err := Wrap(ctx, net, pg, Options{GradientAsBucketView: true, FirstBucketCapBytes: 64, BucketCapBytes: 300})
		if err != nil {
			return err
		}
		check := func(when string) error {
			for _, np := range net.NamedParameters() {
				if a := uintptr(unsafe.Pointer(unsafe.SliceData(np.Param.Grad.Data()))) % 64; a != 0 {
					return fmt.Errorf("%s: gradient of %q is %d bytes past a cache line", when, np.Name, a)
				}
			}
			return nil
		}
		if err := check("after Wrap"); err != nil {
			return err
		}
		data := newDataset(1, 10, 3, 12)
		if err := data.pass(ctx, m, 0, 4); err != nil {
			return err
		}
		return check("after the rebuild")
	})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
}

// TestStatsCommunication: the per-step communication line divides by the
// synchronised steps and states the hidden share.
func TestStatsCommunication(t *testing.T) {
	s := Stats{Steps: 2, LocalSteps: 5, Busy: 4 * time.Millisecond, Hidden: 3 * time.Millisecond, Exposed: 2 * time.Millisecond}
	want := "gradient all-reduce busy 2ms per step (75% of it behind backward), exposed 1ms per step"
	if got := s.Communication(); got != want {
		t.Errorf("Communication() = %q, want %q", got, want)
	}
	if got := (Stats{}).Communication(); !strings.Contains(got, "busy 0s per step (0% ") {
		t.Errorf("Communication() of no steps = %q", got)
	}
}
