package ddp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// TestBroadcastBuffers checks that at the start of every forward pass of
// the wrapped module each rank's BatchNorm statistics equal rank 0's (each
// rank starts with different ones and updates them with its own batch), and
// that with NoBroadcastBuffers they do not.
func TestBroadcastBuffers(t *testing.T) {
	for _, noBroadcast := range []bool{false, true} {
		for _, world := range []int{2, 3} {
			t.Run(fmt.Sprintf("world=%d/no-broadcast=%v", world, noBroadcast), func(t *testing.T) {
				const steps = 4
				data := newDataset(3, 200, 3, 6)
				// seen[step][rank] = buffers at the start of the module's forward.
				seen := make([][][][]float32, steps)
				for s := range seen {
					seen[s] = make([][][]float32, world)
				}
				after := make([][][]float32, world) // after an eval forward
				errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
					ctx := context.Background()
					r := pg.Rank()
					net := newBNNet(uint64(10+r), 6, 8, 3)
					step := 0
					net.probe = func() {
						if step < steps {
							seen[step][r] = snapshotBuffers(net)
						}
					}
					m, err := Wrap(ctx, net, pg, Options{NoBroadcastBuffers: noBroadcast})
					if err != nil {
						return err
					}
					opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: 0.1}}, optim.SGDOptions{})
					if err != nil {
						return err
					}
					for ; step < steps; step++ {
						if err := data.pass(ctx, m, (step*world+r)*4, (step*world+r+1)*4); err != nil {
							return err
						}
						opt.Step()
						opt.ZeroGrad()
					}
					m.SetTraining(false)
					x, _ := data.batch(0, 4)
					if _, err := m.Forward(ctx, x); err != nil {
						return err
					}
					after[r] = snapshotBuffers(net)
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				equal := func(a, b [][]float32) bool {
					return slices.EqualFunc(a, b, func(x, y []float32) bool { return slices.Equal(x, y) })
				}
				for s := range seen {
					if s == 0 && noBroadcast {
						continue // Wrap copied rank 0's buffers; they have not diverged yet
					}
					for r := 1; r < world; r++ {
						if eq := equal(seen[s][r], seen[s][0]); eq == noBroadcast {
							t.Fatalf("step %d rank %d: buffers equal to rank 0's = %v, want %v", s, r, eq, !noBroadcast)
						}
					}
				}
				for r := 1; r < world; r++ {
					if eq := equal(after[r], after[0]); eq == noBroadcast {
						t.Fatalf("after an eval forward, rank %d buffers equal to rank 0's = %v, want %v", r, eq, !noBroadcast)
					}
				}
			})
		}
	}
}

// TestBatchNormEquivalence: a BatchNorm model's parameters still match the
// single-process run when each rank normalises with its own batch... they
// cannot (batch statistics are per rank), so this checks replicas stay
// identical and training runs with buffers synchronised.
func TestBatchNormReplicasStayEqual(t *testing.T) {
	const world = 3
	data := newDataset(4, 300, 3, 6)
	got := make([][][]float32, world)
	errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
		ctx := context.Background()
		net := newBNNet(uint64(20+pg.Rank()), 6, 8, 3)
		m, err := Wrap(ctx, net, pg, smallBuckets)
		if err != nil {
			return err
		}
		opt, err := optim.NewAdamW([]optim.Group{{Params: nn.Parameters(m), LR: 0.01}}, optim.AdamDefaults())
		if err != nil {
			return err
		}
		for s := 0; s < 5; s++ {
			lo := (s*world + pg.Rank()) * 5
			if err := data.pass(ctx, m, lo, lo+5); err != nil {
				return err
			}
			opt.Step()
			opt.ZeroGrad()
		}
		got[pg.Rank()] = dptest.Params(net)
		return nil
	})
	sameReplicas(t, errs, got)
}

func TestUnusedParameters(t *testing.T) {
	t.Run("error names the parameter", func(t *testing.T) {
		for _, view := range []bool{false, true} {
			errs := runDist(t, 2, func(pg distributed.ProcessGroup) error {
				ctx := context.Background()
				net := withUnused(newMLP(uint64(pg.Rank()), 4, 5, 3), 1)
				m, err := Wrap(ctx, net, pg, Options{GradientAsBucketView: view, FirstBucketCapBytes: 16, BucketCapBytes: 16})
				if err != nil {
					return err
				}
				data := newDataset(5, 20, 3, 4)
				return data.pass(ctx, m, pg.Rank()*2, pg.Rank()*2+2)
			})
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), `"spare.weight"`) || !strings.Contains(err.Error(), "FindUnusedParameters") {
					t.Fatalf("view=%v rank %d: err = %v, want one naming \"spare.weight\" and FindUnusedParameters", view, r, err)
				}
			}
		}
	})
	t.Run("FindUnusedParameters matches single process", func(t *testing.T) {
		for _, view := range []bool{false, true} {
			c := mlpCfg()
			c.net = func(seed uint64) nn.Layer { return withUnused(newMLP(seed, 12, 16, 16, 5), seed) }
			c.world, c.opt = 3, "sgd"
			c.opts = Options{FindUnusedParameters: true, GradientAsBucketView: view, FirstBucketCapBytes: 64, BucketCapBytes: 600}
			c.run(t)
		}
	})
	t.Run("used on some ranks only", func(t *testing.T) {
		// Rank 1 skips the last layer's bias path via a model that uses the
		// spare parameter only on even ranks; with FindUnusedParameters the
		// ranks must still agree and not hang.
		const world = 3
		got := make([][][]float32, world)
		errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
			ctx := context.Background()
			r := pg.Rank()
			net := newMLP(uint64(r), 4, 5, 3)
			spare := net.param(rngFor(7), "spare", 0.1, 3)
			if r%2 == 0 {
				net.stages = append(net.stages, func(x *autograd.Var) *autograd.Var { return autograd.Add(x, spare) })
			}
			m, err := Wrap(ctx, net, pg, Options{FindUnusedParameters: true, FirstBucketCapBytes: 16, BucketCapBytes: 16})
			if err != nil {
				return err
			}
			opt, _ := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: 0.1}}, optim.SGDOptions{})
			data := newDataset(5, 40, 3, 4)
			for s := 0; s < 3; s++ {
				lo := (s*world + r) * 2
				if err := data.pass(ctx, m, lo, lo+2); err != nil {
					return err
				}
				opt.Step()
				opt.ZeroGrad()
			}
			got[r] = dptest.Params(net)
			return nil
		})
		sameReplicas(t, errs, got)
	})
}

func TestWrapMismatch(t *testing.T) {
	tests := []struct {
		name  string
		world int
		bad   int // the rank whose model differs
		build func(rank, bad int) *testNet
		want  []string
	}{
		{"shape", 3, 2, func(r, bad int) *testNet {
			if r == bad {
				return newMLP(0, 4, 6, 3)
			}
			return newMLP(0, 4, 5, 3)
		}, []string{"rank 2", `"0.weight"`, "[6 4]", "[5 4]"}},
		{"extra parameter", 2, 1, func(r, bad int) *testNet {
			n := newMLP(0, 4, 5, 3)
			if r == bad {
				withUnused(n, 0)
			}
			return n
		}, []string{"rank 1", `"spare.weight"`}},
		{"name", 4, 3, func(r, bad int) *testNet {
			n := newMLP(0, 4, 5, 3)
			if r == bad {
				n.params[1].Name = "0.b"
			}
			return n
		}, []string{"rank 3", `"0.b"`, `"0.bias"`}},
		{"frozen", 2, 1, func(r, bad int) *testNet {
			n := newMLP(0, 4, 5, 3)
			if r == bad {
				n.params[0].Param.SetRequiresGrad(false)
			}
			return n
		}, []string{"rank 1", `"0.weight"`, "frozen"}},
		{"buffer", 2, 0, func(r, bad int) *testNet {
			n := newBNNet(0, 4, 5, 3)
			if r == bad {
				n.buffers = n.buffers[:1]
			}
			return n
		}, []string{"rank 1", `"1.running_var"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := runDist(t, tt.world, func(pg distributed.ProcessGroup) error {
				_, err := Wrap(context.Background(), tt.build(pg.Rank(), tt.bad), pg, Options{})
				return err
			})
			for r, err := range errs {
				if err == nil {
					t.Fatalf("rank %d: Wrap succeeded", r)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("rank %d: err = %v, want it to mention %s", r, err, w)
					}
				}
			}
		})
	}
}

// TestWrapBroadcasts checks that parameters and buffers come from rank 0.
func TestWrapBroadcasts(t *testing.T) {
	const world = 3
	var mu sync.Mutex
	params := map[int][][]float32{}
	bufs := map[int][][]float32{}
	errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
		net := newBNNet(uint64(pg.Rank()), 4, 5, 3)
		if _, err := Wrap(context.Background(), net, pg, Options{BucketCapBytes: 40}); err != nil {
			return err
		}
		mu.Lock()
		params[pg.Rank()], bufs[pg.Rank()] = dptest.Params(net), snapshotBuffers(net)
		mu.Unlock()
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	want := newBNNet(0, 4, 5, 3)
	for r := 0; r < world; r++ {
		for i, p := range dptest.Params(want) {
			if !slices.Equal(params[r][i], p) {
				t.Fatalf("rank %d parameter %d is not rank 0's", r, i)
			}
		}
		for i, b := range snapshotBuffers(want) {
			if !slices.Equal(bufs[r][i], b) {
				t.Fatalf("rank %d buffer %d is not rank 0's", r, i)
			}
		}
	}
}

// TestCommFailure: a failing collective surfaces as an error wrapping
// distributed.ErrAborted on every rank (naming the bucket when it is a gradient
// reduction); nobody hangs. Every op of a short run fails in turn.
func TestCommFailure(t *testing.T) {
	run := func(h *fakeHub) []error {
		return runHub(t, h, func(pg distributed.ProcessGroup) error {
			ctx := context.Background()
			m, err := Wrap(ctx, newMLP(1, 4, 5, 3), pg, Options{FirstBucketCapBytes: 16, BucketCapBytes: 64})
			if err != nil {
				return err
			}
			data := newDataset(5, 20, 3, 4)
			for s := 0; s < 2; s++ {
				if err := data.pass(ctx, m, s*2, s*2+2); err != nil {
					return err
				}
			}
			return nil
		})
	}
	clean := newFakeHub(2)
	for r, err := range run(clean) {
		if err != nil {
			t.Fatalf("clean run: rank %d: %v", r, err)
		}
	}
	if len(clean.log) < 6 {
		t.Fatalf("clean run issued %d ops (%v), want several buckets", len(clean.log), clean.log)
	}
	for i, kind := range clean.log {
		t.Run(fmt.Sprintf("op=%d/%s", i, kind), func(t *testing.T) {
			h := newFakeHub(2)
			h.failAt = int64(i)
			for r, err := range run(h) {
				if !errors.Is(err, distributed.ErrAborted) {
					t.Fatalf("rank %d: err = %v, want one wrapping distributed.ErrAborted", r, err)
				}
				if strings.HasPrefix(kind, "allreduce") && !strings.Contains(err.Error(), "bucket") {
					t.Fatalf("rank %d: err = %v, want it to name the bucket", r, err)
				}
			}
		})
	}
}

func TestMisuse(t *testing.T) {
	data := newDataset(5, 20, 3, 4)
	tests := []struct {
		name string
		fn   func(ctx context.Context, m *Model, net *testNet) error
		want string
	}{
		{"backward without forward", func(ctx context.Context, m *Model, net *testNet) error {
			x, y := data.batch(0, 2)
			out := net.Forward(x)
			return m.Backward(ctx, loss(out, y))
		}, "no Forward"},
		{"local backward through the module", func(ctx context.Context, m *Model, net *testNet) error {
			x, y := data.batch(0, 2)
			autograd.Backward(loss(net.Forward(x), y))
			_, err := m.Forward(ctx, x)
			return err
		}, "did not start from Model.Forward"},
		{"closed", func(ctx context.Context, m *Model, net *testNet) error {
			m.Close()
			x, _ := data.batch(0, 2)
			_, err := m.Forward(ctx, x)
			return err
		}, "closed"},
		{"nested join", func(ctx context.Context, m *Model, net *testNet) error {
			return m.Join(ctx, func() error { return m.Join(ctx, func() error { return nil }) })
		}, "already inside Join"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := runDist(t, 1, func(pg distributed.ProcessGroup) error {
				net := newMLP(1, 4, 5, 3)
				m, err := Wrap(context.Background(), net, pg, Options{})
				if err != nil {
					return err
				}
				return tt.fn(context.Background(), m, net)
			})
			if errs[0] == nil || !strings.Contains(errs[0].Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", errs[0], tt.want)
			}
		})
	}
}

// TestGradReplaced: in bucket-view mode a Grad that the user replaced or
// dropped is carried into the bucket, so results stay correct.
func TestGradReplaced(t *testing.T) {
	c := mlpCfg()
	c.world, c.opt = 2, "sgd"
	c.opts = Options{GradientAsBucketView: true}
	want := c.reference(t)
	got := make([][][]float32, c.world)
	errs := runDist(t, c.world, func(pg distributed.ProcessGroup) error {
		ctx := context.Background()
		r := pg.Rank()
		net := c.net(uint64(100 + r))
		m, err := Wrap(ctx, net, pg, c.opts)
		if err != nil {
			return err
		}
		opt, _ := c.optimizer(m)
		for s := 0; s < c.steps; s++ {
			lo, hi := c.samples(r, s, 0)
			if err := c.data.pass(ctx, m, lo, hi); err != nil {
				return err
			}
			opt.Step()
			for i, np := range m.NamedParameters() { // set_to_none, or a fresh tensor
				if i%2 == 0 {
					np.Param.Grad = nil
				} else {
					np.Param.Grad = tensor.New(np.Param.Value.Shape()...)
				}
			}
		}
		got[r] = dptest.Params(net)
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range got {
		for i := range want {
			for j := range want[i] {
				if d := got[r][i][j] - want[i][j]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("rank %d parameter %d: %g vs %g", r, i, got[r][i][j], want[i][j])
				}
			}
		}
	}
}

func TestVerifyReplicas(t *testing.T) {
	const world = 3
	for _, perturb := range []int{-1, 1, 2} {
		t.Run(fmt.Sprintf("perturbed-rank=%d", perturb), func(t *testing.T) {
			errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
				ctx := context.Background()
				net := newMLP(uint64(pg.Rank()), 4, 5, 3)
				m, err := Wrap(ctx, net, pg, Options{})
				if err != nil {
					return err
				}
				if err := m.VerifyReplicas(ctx); err != nil {
					return fmt.Errorf("right after Wrap: %w", err)
				}
				if pg.Rank() == perturb {
					net.params[2].Param.Value.Data()[3] += 1e-7
				}
				return m.VerifyReplicas(ctx)
			})
			for r, err := range errs {
				if perturb < 0 {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
					continue
				}
				want := fmt.Sprintf("rank %d (first differing parameter %q)", perturb, "2.weight")
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("rank %d: err = %v, want one containing %q", r, err, want)
				}
			}
		})
	}
}

// sameReplicas fails unless no rank failed (errs) and every rank's
// parameters (got, by rank) equal rank 0's bit for bit.
func sameReplicas(t *testing.T, errs []error, got [][][]float32) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := 1; r < len(got); r++ {
		for i := range got[0] {
			if !slices.Equal(got[r][i], got[0][i]) {
				t.Fatalf("rank %d parameter %d differs from rank 0's", r, i)
			}
		}
	}
}
