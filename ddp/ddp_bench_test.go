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
