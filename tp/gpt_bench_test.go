package tp_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tp"
)

// gptRank is one rank of GPT-mini split over a tensor-parallel group,
// with a fixed batch: step runs a forward and backward pass.
type gptRank struct {
	m        *tp.GPT
	idx, tgt []int64
	b, t     int
}

func newGPTRank(tb testing.TB, pg distributed.ProcessGroup, B, T int) *gptRank {
	rng := rand.New(rand.NewPCG(1, 2)) // the same weights and batch on every rank
	full, err := models.NewGPT(rng, models.GPTMini())
	if err != nil {
		tb.Fatal(err)
	}
	m, err := tp.NewGPT(pg, full)
	if err != nil {
		tb.Fatal(err)
	}
	r := &gptRank{m: m, idx: make([]int64, B*T), tgt: make([]int64, B*T), b: B, t: T}
	for i := range r.idx {
		r.idx[i], r.tgt[i] = int64(rng.IntN(256)), int64(rng.IntN(256))
	}
	return r
}

func (r *gptRank) step(ctx context.Context) error {
	nn.ZeroGrad(r.m)
	logits, err := r.m.Forward(ctx, r.idx, r.b, r.t)
	if err != nil {
		return err
	}
	autograd.Transient(logits) // read only by the loss
	loss, err := r.m.Loss(ctx, logits, r.tgt)
	if err != nil {
		return err
	}
	return r.m.Backward(loss)
}

// stepAll runs n steps on every rank, each on its own goroutine; a rank
// that fails closes its group so that its peers fail fast. It returns the
// first rank's error, naming the rank.
func stepAll(ctx context.Context, ranks []*gptRank, pgs []distributed.ProcessGroup, n int) error {
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			for range n {
				if errs[r] = ranks[r].step(ctx); errs[r] != nil {
					pgs[r].Close()
					return
				}
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// inprocGroups returns world native groups over an in-process mesh.
func inprocGroups(tb testing.TB, world int) []distributed.ProcessGroup {
	mesh := inproc.NewMesh(world)
	pgs := make([]distributed.ProcessGroup, world)
	for r := range pgs {
		pg, err := native.New(mesh[r], distributed.GroupOptions{Timeout: distributedtest.Timeout})
		if err != nil {
			tb.Fatal(err)
		}
		pgs[r] = pg
		tb.Cleanup(func() { pg.Close() })
	}
	return pgs
}

// BenchmarkGPTMiniStep: a training step's forward and backward pass of
// GPT-mini split over 2 tensor-parallel ranks, goroutines of this
// process (over an in-process transport), at two batch sizes of 64-token
// sequences. tokens/s counts the batch once (both ranks train on it);
// allocations are both ranks'. models' BenchmarkGPTMiniStep is the one
// process's step.
func BenchmarkGPTMiniStep(b *testing.B) {
	const world, T = 2, 64
	for _, B := range []int{8, 32} {
		b.Run(fmt.Sprintf("tp2/batch%d", B), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			pgs := inprocGroups(b, world)
			ranks := make([]*gptRank, world)
			for r, pg := range pgs {
				ranks[r] = newGPTRank(b, pg, B, T)
			}
			// One warm-up step: the free lists fill, the heap grows.
			if err := stepAll(ctx, ranks, pgs, 1); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := stepAll(ctx, ranks, pgs, b.N); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(B*T*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestGPTStepReusesMemory: once warm, a tensor-parallel training step
// takes its activations and gradients from the storage the previous step
// recycled, as the one-process model does (models'
// TestGPTStepReusesMemory): both ranks together allocate less per step
// than their parameters' gradients and an eighth of the first step. The
// in-process transport's queued message copies, which depend on timing
// and which the shared-memory and TCP transports of real runs do not
// make, are left out of the count.
func TestGPTStepReusesMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation")
	}
	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 1 // every allocation, with its stack
	defer func() { runtime.MemProfileRate = rate }()
	const world, B, T = 2, 16, 64
	ctx := distributedtest.Context(t, time.Minute)
	pgs := inprocGroups(t, world)
	ranks := make([]*gptRank, world)
	var paramBytes uint64
	for r, pg := range pgs {
		ranks[r] = newGPTRank(t, pg, B, T)
		for _, p := range nn.Parameters(ranks[r].m) {
			paramBytes += 4 * uint64(p.Value.Len())
		}
	}
	allocated := func(n int) uint64 {
		before := allocatedOutside("cohort/distributed/")
		if err := stepAll(ctx, ranks, pgs, n); err != nil {
			t.Fatal(err)
		}
		return (allocatedOutside("cohort/distributed/") - before) / uint64(n)
	}
	first := allocated(1)
	allocated(2)
	steady := allocated(3)
	t.Logf("first step %d KiB, steady state %d KiB per step (both ranks), of which parameter gradients %d KiB", first>>10, steady>>10, paramBytes>>10)
	if steady > paramBytes+first/8 {
		t.Errorf("a steady-state step allocates %d KiB: more than the %d KiB of parameter gradients and an eighth of the first step's %d KiB", steady>>10, paramBytes>>10, first>>10)
	}
}

// allocatedOutside returns the bytes allocated so far (as the memory
// profile records them, at runtime.MemProfileRate) by calls whose stack
// passes through no function whose name contains pkg.
func allocatedOutside(pkg string) uint64 {
	// The profile is published as of the last completed collection, up
	// to two cycles behind.
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	var total uint64
	for _, r := range recs {
		outside := true
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.Contains(f.Function, pkg) {
				outside = false
				break
			}
			if !more {
				break
			}
		}
		if outside {
			total += uint64(r.AllocBytes)
		}
	}
	return total
}
