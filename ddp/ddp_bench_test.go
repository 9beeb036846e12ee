package ddp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"cohort/autograd"
	"cohort/dist"
	"cohort/dist/transport/inproc"
	"cohort/models"
	"cohort/nn"
	"cohort/optim"
	"cohort/tensor"
)

// BenchmarkOverhead measures what DDP costs on a single rank: the anchor
// training step (batch 64, SGD with momentum) run plainly, through a
// world-1 Model copying gradients into buckets, and through one with
// gradients as bucket views. Run with COHORT_NUM_THREADS=1 to match the
// anchor's one thread per rank, and compare samples/s.
func BenchmarkOverhead(b *testing.B) {
	nets := []struct {
		name  string
		build func(*rand.Rand) nn.Layer
		shape []int
	}{
		{"mlp", func(r *rand.Rand) nn.Layer { return models.MLP(r) }, []int{784}},
		{"lenet", func(r *rand.Rand) nn.Layer { return models.LeNet(r) }, []int{1, 28, 28}},
	}
	modes := []struct {
		name string
		ddp  bool
		opts Options
	}{
		{"plain", false, Options{}},
		{"ddp", true, Options{}},
		{"ddp-view", true, Options{GradientAsBucketView: true}},
	}
	const batch = 64
	for _, nt := range nets {
		for _, md := range modes {
			b.Run(fmt.Sprintf("%s/%s", nt.name, md.name), func(b *testing.B) {
				ctx := context.Background()
				net := nt.build(rand.New(rand.NewPCG(0, 0)))
				var model nn.Module = net
				forward := func(x *autograd.Var) (*autograd.Var, error) { return net.Forward(x), nil }
				backward := func(l *autograd.Var) error { autograd.Backward(l); return nil }
				var m *Model
				if md.ddp {
					pg, err := dist.New(inproc.NewMesh(1)[0], dist.GroupOptions{})
					if err != nil {
						b.Fatal(err)
					}
					defer pg.Close()
					if m, err = Wrap(ctx, net, pg, md.opts); err != nil {
						b.Fatal(err)
					}
					model = m
					forward = func(x *autograd.Var) (*autograd.Var, error) { return m.Forward(ctx, x) }
					backward = func(l *autograd.Var) error { return m.Backward(ctx, l) }
				}
				opt, err := optim.NewSGD([]optim.Group{{Params: optim.Params(model), LR: 0.01}}, optim.SGDOptions{Momentum: 0.9})
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, 1))
				per := 1
				for _, s := range nt.shape {
					per *= s
				}
				type sample struct {
					x *tensor.Tensor
					y []int64
				}
				batches := make([]sample, 4)
				for i := range batches {
					x := tensor.New(append([]int{batch}, nt.shape...)...)
					x.FillNormal(rng, 0, 1)
					y := make([]int64, batch)
					for j := range y {
						y[j] = int64(rng.IntN(10))
					}
					batches[i] = sample{x, y}
				}
				step := func(i int) {
					s := batches[i%len(batches)]
					out, err := forward(autograd.NewVar(s.x, false))
					if err != nil {
						b.Fatal(err)
					}
					if err := backward(loss(out, s.y)); err != nil {
						b.Fatal(err)
					}
					opt.Step()
					opt.ZeroGrad()
				}
				for i := 0; i < 5; i++ { // warm-up (and the bucket rebuild)
					step(i)
				}
				if m != nil {
					m.ResetStats()
				}
				i := 0
				start := time.Now()
				for b.Loop() {
					step(i)
					i++
				}
				b.ReportMetric(float64(batch*i)/time.Since(start).Seconds(), "samples/s")
				if m != nil {
					st := m.Stats()
					b.ReportMetric(float64(st.Exposed.Microseconds())/float64(max(st.Steps, 1)), "exposed-µs/step")
				}
			})
		}
	}
}

// BenchmarkWorld2 trains the anchor models on two ranks in this process
// (in-process transport; both ranks share the machine's cores as two
// processes would) and reports samples/s over both ranks and the share of
// gradient communication hidden behind backward.
func BenchmarkWorld2(b *testing.B) {
	nets := []struct {
		name  string
		build func(*rand.Rand) nn.Layer
		shape []int
	}{
		{"mlp", func(r *rand.Rand) nn.Layer { return models.MLP(r) }, []int{784}},
		{"lenet", func(r *rand.Rand) nn.Layer { return models.LeNet(r) }, []int{1, 28, 28}},
	}
	const world, batch = 2, 64
	for _, nt := range nets {
		for _, view := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/view=%v", nt.name, view), func(b *testing.B) {
				ctx := context.Background()
				mesh := inproc.NewMesh(world)
				type rankState struct {
					m    *Model
					opt  optim.Optimizer
					x    *tensor.Tensor
					y    []int64
					errc chan error
				}
				ranks := make([]*rankState, world)
				for r := range ranks {
					pg, err := dist.New(mesh[r], dist.GroupOptions{})
					if err != nil {
						b.Fatal(err)
					}
					defer pg.Close()
					ranks[r] = &rankState{errc: make(chan error, 1)}
					rs := ranks[r]
					go func() {
						net := nt.build(rand.New(rand.NewPCG(uint64(r), 0)))
						m, err := Wrap(ctx, net, pg, Options{GradientAsBucketView: view})
						rs.m = m
						rs.errc <- err
					}()
				}
				for r, rs := range ranks {
					if err := <-rs.errc; err != nil {
						b.Fatalf("rank %d: %v", r, err)
					}
					opt, err := optim.NewSGD([]optim.Group{{Params: optim.Params(rs.m), LR: 0.01}}, optim.SGDOptions{Momentum: 0.9})
					if err != nil {
						b.Fatal(err)
					}
					rs.opt = opt
					rng := rand.New(rand.NewPCG(2, uint64(r)))
					rs.x = tensor.New(append([]int{batch}, nt.shape...)...)
					rs.x.FillNormal(rng, 0, 1)
					rs.y = make([]int64, batch)
					for j := range rs.y {
						rs.y[j] = int64(rng.IntN(10))
					}
				}
				steps := func(n int) {
					for _, rs := range ranks {
						go func() {
							for range n {
								out, err := rs.m.Forward(ctx, autograd.NewVar(rs.x, false))
								if err == nil {
									err = rs.m.Backward(ctx, loss(out, rs.y))
								}
								if err != nil {
									rs.errc <- err
									return
								}
								rs.opt.Step()
								rs.opt.ZeroGrad()
							}
							rs.errc <- nil
						}()
					}
					for r, rs := range ranks {
						if err := <-rs.errc; err != nil {
							b.Fatalf("rank %d: %v", r, err)
						}
					}
				}
				steps(5) // warm-up and the bucket rebuild
				for _, rs := range ranks {
					rs.m.ResetStats()
				}
				n := 0
				start := time.Now()
				for b.Loop() {
					steps(1)
					n++
				}
				b.ReportMetric(float64(world*batch*n)/time.Since(start).Seconds(), "samples/s")
				st := ranks[0].m.Stats()
				b.ReportMetric(st.HiddenFraction(), "hidden-frac")
				b.ReportMetric(float64(st.Comm.Microseconds())/float64(max(st.Steps, 1)), "comm-µs/step")
				b.ReportMetric(float64(st.Exposed.Microseconds())/float64(max(st.Steps, 1)), "exposed-µs/step")
			})
		}
	}
}
