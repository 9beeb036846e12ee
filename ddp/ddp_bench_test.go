package ddp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// anchorNets are the anchor models the benchmarks train, with the shape
// of one input sample.
var anchorNets = []struct {
	name  string
	build func(*rand.Rand) nn.Layer
	shape []int
}{
	{"mlp", func(r *rand.Rand) nn.Layer { return models.MLP(r) }, []int{784}},
	{"lenet", func(r *rand.Rand) nn.Layer { return models.LeNet(r) }, []int{1, 28, 28}},
}

// BenchmarkOverhead measures what DDP costs on a single rank: the anchor
// training step (batch 64, SGD with momentum) of a plain model and of a
// world-1 Model (copying gradients into buckets, or with gradients as
// bucket views) are timed alternately, step by step, so that the load of
// a shared machine hits both alike. It reports both throughputs (from the
// median step times) and the overhead in percent. Run with
// COHORT_NUM_THREADS=1 to match the anchor's one thread per rank.
func BenchmarkOverhead(b *testing.B) {
	nets := anchorNets
	const batch = 64
	for _, nt := range nets {
		for _, view := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/view=%v", nt.name, view), func(b *testing.B) {
				ctx := context.Background()
				rng := rand.New(rand.NewPCG(1, 1))
				x := tensor.New(append([]int{batch}, nt.shape...)...)
				x.FillNormal(rng, 0, 1)
				y := make([]int64, batch)
				for j := range y {
					y[j] = int64(rng.IntN(10))
				}
				pg, err := native.New(inproc.NewMesh(1)[0], distributed.GroupOptions{})
				if err != nil {
					b.Fatal(err)
				}
				defer pg.Close()
				plainNet := nt.build(rand.New(rand.NewPCG(0, 0)))
				ddpNet := nt.build(rand.New(rand.NewPCG(0, 0)))
				m, err := Wrap(ctx, ddpNet, pg, Options{GradientAsBucketView: view})
				if err != nil {
					b.Fatal(err)
				}
				newOpt := func(mod nn.Module) optim.Optimizer {
					opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(mod), LR: 0.01}}, optim.SGDOptions{Momentum: 0.9})
					if err != nil {
						b.Fatal(err)
					}
					return opt
				}
				plainOpt, ddpOpt := newOpt(plainNet), newOpt(m)
				var cpuPlain, cpuDDP time.Duration
				plain := func() time.Duration {
					c0 := cpuTime()
					t0 := time.Now()
					autograd.Backward(loss(plainNet.Forward(autograd.NewVar(x, false)), y))
					plainOpt.Step()
					plainOpt.ZeroGrad()
					d := time.Since(t0)
					cpuPlain += cpuTime() - c0
					return d
				}
				wrapped := func() time.Duration {
					c0 := cpuTime()
					defer func() { cpuDDP += cpuTime() - c0 }()
					t0 := time.Now()
					out, err := m.Forward(ctx, autograd.NewVar(x, false))
					if err == nil {
						err = m.Backward(ctx, loss(out, y))
					}
					if err != nil {
						b.Fatal(err)
					}
					ddpOpt.Step()
					ddpOpt.ZeroGrad()
					return time.Since(t0)
				}
				for range 5 { // warm-up (and the bucket rebuild)
					plain()
					wrapped()
				}
				cpuPlain, cpuDDP = 0, 0
				var tp, td []time.Duration
				for b.Loop() { // alternate which goes first
					if len(tp)%2 == 0 {
						tp = append(tp, plain())
						td = append(td, wrapped())
					} else {
						td = append(td, wrapped())
						tp = append(tp, plain())
					}
				}
				mp, md := median(tp), median(td)
				b.ReportMetric(batch/mp.Seconds(), "plain-samples/s")
				b.ReportMetric(batch/md.Seconds(), "ddp-samples/s")
				b.ReportMetric(100*(md.Seconds()/mp.Seconds()-1), "overhead-%")
				// CPU time of the process is less disturbed by other
				// processes than wall time.
				b.ReportMetric(100*(cpuDDP.Seconds()/cpuPlain.Seconds()-1), "cpu-overhead-%")
			})
		}
	}
}

// cpuTime returns the CPU time (user + system) used by this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkWorld2 trains the anchor models on two ranks in this process
// (in-process transport; both ranks share the machine's cores as two
// processes would) and reports samples/s over both ranks and the share of
// gradient communication hidden behind backward.
func BenchmarkWorld2(b *testing.B) {
	nets := anchorNets
	const world, batch = 2, 64
	for _, nt := range nets {
		for _, cfg := range []struct {
			name string
			o    Options
		}{
			{"copy", Options{}},
			{"view", Options{GradientAsBucketView: true}},
			{"view/first-cap=64KiB", Options{GradientAsBucketView: true, FirstBucketCapBytes: 64 << 10}},
			{"view/verify-every=1", Options{GradientAsBucketView: true, VerifyEvery: 1}}, // the divergence guard's cost per check
		} {
			b.Run(fmt.Sprintf("%s/%s", nt.name, cfg.name), func(b *testing.B) {
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
					pg, err := native.New(mesh[r], distributed.GroupOptions{})
					if err != nil {
						b.Fatal(err)
					}
					defer pg.Close()
					ranks[r] = &rankState{errc: make(chan error, 1)}
					rs := ranks[r]
					go func() {
						net := nt.build(rand.New(rand.NewPCG(uint64(r), 0)))
						m, err := Wrap(ctx, net, pg, cfg.o)
						rs.m = m
						rs.errc <- err
					}()
				}
				for r, rs := range ranks {
					if err := <-rs.errc; err != nil {
						b.Fatalf("rank %d: %v", r, err)
					}
					opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(rs.m), LR: 0.01}}, optim.SGDOptions{Momentum: 0.9})
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
				b.ReportMetric(float64(st.Busy.Microseconds())/float64(max(st.Steps, 1)), "busy-µs/step")
				b.ReportMetric(float64(st.Exposed.Microseconds())/float64(max(st.Steps, 1)), "exposed-µs/step")
			})
		}
	}
}

// BenchmarkVerifyReplicas measures one check of the divergence guard
// (Options.VerifyEvery) on the MNIST MLP (1.86 M parameters in 6 tensors)
// at world 2 over the in-process transport: both ranks hash their
// parameters and all-gather the hashes. Compare µs/check with the step
// time of BenchmarkWorld2/mlp/view to price a period N: the guard costs
// µs/check / N per step.
func BenchmarkVerifyReplicas(b *testing.B) {
	const world = 2
	ctx := context.Background()
	mesh := inproc.NewMesh(world)
	ms := make([]*Model, world)
	errc := make(chan error, world)
	for r := range world {
		pg, err := native.New(mesh[r], distributed.GroupOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer pg.Close()
		go func() {
			m, err := Wrap(ctx, models.MLP(rand.New(rand.NewPCG(uint64(r), 0))), pg, Options{})
			ms[r] = m
			errc <- err
		}()
	}
	for range world {
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
	var paramBytes int64
	for _, np := range ms[0].params {
		paramBytes += int64(np.Param.Value.Len()) * 4
	}
	b.SetBytes(paramBytes)
	start, n := time.Now(), 0
	for b.Loop() {
		go func() { errc <- ms[1].VerifyReplicas(ctx) }()
		if err := ms[0].VerifyReplicas(ctx); err != nil {
			b.Fatal(err)
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(max(n, 1)), "µs/check")
}
