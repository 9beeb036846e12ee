package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/store/memstore"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/obs"
	"github.com/cohortml/cohort/optim"
)

// BenchmarkObsOverhead prices watching a run: two 2-rank MNIST MLP jobs
// (batch 64 per rank, the program's own trainEpoch) run side by side in
// this process over the in-process transport, one plain (watchdog off, no
// trace) and one observed (watchdog on at its default interval, every
// rank writing its Chrome trace with ddp's bucket spans). Their steps
// alternate (plain, observed, observed, plain, …), so that the load of a
// shared machine hits both alike. It reports both median step times
// (rank 0's) and the overhead in percent from the medians and from the
// median of the paired ratios. The flight recorder is on in both, as it
// always is. The control sub-benchmark pits two plain jobs against each
// other the same way, to show the measurement's own noise.
//
//	go test -run '^$' -bench ObsOverhead -benchtime 300x ./examples/mnist
func BenchmarkObsOverhead(b *testing.B) {
	trainSet, _, err := datasets.LoadMNIST("")
	if err != nil {
		b.Skipf("MNIST not available: %v", err)
	}
	// control runs two plain jobs through the same harness: its
	// "overhead" is the harness's noise floor and bias.
	for _, observe := range []bool{true, false} {
		name := "observed"
		if !observe {
			name = "control"
		}
		b.Run(name, func(b *testing.B) { benchObsOverhead(b, trainSet, observe) })
	}
}

func benchObsOverhead(b *testing.B, trainSet *datasets.MNIST, observe bool) {
	const world, batch = 2, 64
	ctx := context.Background()
	type rankJob struct {
		m     *ddp.Model
		opt   *optim.SGD
		sched *optim.Scheduler
		run   *obs.Run
	}
	type job struct {
		ranks [world]*rankJob
		times []time.Duration // rank 0's step times
		step  int
	}
	newJob := func(observed bool) *job {
		j := &job{}
		mesh := inproc.NewMesh(world)
		st := memstore.New()
		b.Cleanup(func() { st.Close() })
		traceDir := ""
		if observed {
			traceDir = b.TempDir()
		}
		var wg sync.WaitGroup
		errs := make([]error, world)
		for r := range world {
			pg, err := native.New(mesh[r], distributed.GroupOptions{Timeout: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { pg.Close() })
			if observed {
				if err := distributed.Watch(pg, st, "bench", distributed.WatchdogOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			run, err := obs.Start(ctx, obs.Options{Rank: r, WorldSize: world, TraceDir: traceDir, NoProgress: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { run.Close() })
			o := ddp.Options{GradientAsBucketView: true}
			if tr := run.Tracer(); tr != nil {
				o.Span = func(track, name string) func() { return tr.Begin(track, name).End }
			}
			rj := &rankJob{run: run}
			j.ranks[r] = rj
			wg.Go(func() {
				m, err := ddp.Wrap(ctx, models.MLP(rand.New(rand.NewPCG(1, 0))), pg, o)
				if err != nil {
					errs[r] = err
					return
				}
				rj.m = m
				if rj.opt, errs[r] = optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: 0.01}}, optim.SGDOptions{Momentum: 0.9}); errs[r] != nil {
					return
				}
				rj.sched, errs[r] = optim.NewScheduler(rj.opt, optim.CosineAnnealingLR{TMax: 1 << 20})
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
		return j
	}
	jobs := [2]*job{newJob(false), newJob(observe)}
	order := rand.New(rand.NewPCG(7, 0)).Perm(trainSet.Len())
	step := func(j *job) {
		lo := (j.step * world * batch) % (len(order) - world*batch)
		var wg sync.WaitGroup
		errs := make([]error, world)
		for r, rj := range j.ranks {
			idx := order[lo+r*batch : lo+(r+1)*batch]
			w := watch{run: rj.run, step: j.step}
			if r == 0 {
				w.seen = func(s obs.Step) { j.times = append(j.times, s.Duration) }
			}
			wg.Go(func() {
				_, errs[r] = trainEpoch(ctx, rj.m, rj.opt, rj.sched, trainSet, idx, batch, []int{784}, w, nil)
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
		j.step++
	}
	for range 5 { // warm-up and the bucket rebuild
		step(jobs[0])
		step(jobs[1])
	}
	jobs[0].times, jobs[1].times = nil, nil
	i := 0
	for b.Loop() {
		first := i % 2
		step(jobs[first])
		step(jobs[1-first])
		i++
	}
	plain, observed := slices.Clone(jobs[0].times), slices.Clone(jobs[1].times)
	ratios := make([]float64, len(plain))
	for k := range plain {
		ratios[k] = float64(observed[k]) / float64(plain[k])
	}
	slices.Sort(plain)
	slices.Sort(observed)
	slices.Sort(ratios)
	mp, mo := plain[len(plain)/2], observed[len(observed)/2]
	b.ReportMetric(float64(mp.Microseconds())/1e3, "plain-ms/step")
	b.ReportMetric(float64(mo.Microseconds())/1e3, "observed-ms/step")
	b.ReportMetric(100*(float64(mo)/float64(mp)-1), "overhead-%")
	b.ReportMetric(100*(ratios[len(ratios)/2]-1), "paired-overhead-%")
}
