package ddp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/internal/proctest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
)

// The equivalence property again, with the ranks as real processes: copies
// of this test binary started by the launcher, joined through the job's
// store, talking over TCP or shared memory. Each rank writes its final
// parameters to a file; the parent compares them with a single process
// trained on batch N·b over the same samples.

// Environment of a rank process: the case it runs and where it writes.
var processEnv = proctest.Env{Case: "COHORT_DDP_TEST_PROCESS_CASE", Out: "COHORT_DDP_TEST_PROCESS_OUT"}

type processCase struct {
	name      string
	transport string
	cfg       func() trainCfg
}

func processCases() []processCase {
	var cases []processCase
	nets := []struct {
		name string
		cfg  func() trainCfg
	}{{"mlp", mlpCfg}, {"cnn", cnnCfg}}
	view := Options{GradientAsBucketView: true, FirstBucketCapBytes: 64, BucketCapBytes: 600}
	for _, md := range nets {
		for _, opt := range []string{"sgd", "adamw"} {
			for _, world := range []int{2, 3} {
				for _, tr := range []string{"tcp", "shm"} {
					if tr == "shm" && world == 2 && opt == "adamw" {
						continue // shm: one optimizer per world is enough
					}
					if tr == "shm" && world == 3 && opt == "sgd" {
						continue
					}
					opts := smallBuckets
					if opt == "adamw" {
						opts = view
					}
					cases = append(cases, processCase{
						name:      fmt.Sprintf("%s/%s/world=%d/%s", md.name, opt, world, tr),
						transport: tr,
						cfg: func() trainCfg {
							c := md.cfg()
							c.world, c.opt, c.opts = world, opt, opts
							return c
						},
					})
				}
			}
		}
	}
	cases = append(cases,
		processCase{"mlp/nosync/world=3/tcp", "tcp", func() trainCfg {
			c := mlpCfg()
			c.world, c.opt, c.opts, c.accum = 3, "sgd", view, 3
			return c
		}},
		processCase{"mlp/sgd/world=4/tcp", "tcp", func() trainCfg {
			c := mlpCfg()
			c.world, c.opt, c.opts = 4, "sgd", smallBuckets
			return c
		}},
		processCase{"cnn/adamw/world=4/shm", "shm", func() trainCfg {
			c := cnnCfg()
			c.world, c.opt, c.opts = 4, "adamw", view
			return c
		}},
		// The benchmark's MLP (1.9M parameters, default buckets): the
		// transport carries multi-megabyte reductions.
		processCase{"anchor-mlp/sgd/world=2/tcp", "tcp", func() trainCfg {
			return trainCfg{net: func(seed uint64) nn.Layer { return models.MLP(rand.New(rand.NewPCG(seed, 0))) },
				data: newDataset(7, 64, 10, 784), world: 2, batch: 4, steps: 2, accum: 1, opt: "sgd",
				opts: Options{GradientAsBucketView: true}}
		}},
		processCase{"mlp/join/world=3/tcp", "tcp", func() trainCfg {
			c := mlpCfg()
			c.world, c.opt, c.opts, c.steps = 3, "adamw", view, 4
			c.rankLen = func(r int) int { return []int{4, 2, 0}[r] }
			return c
		}},
	)
	return cases
}

func TestProcessEquivalence(t *testing.T) {
	if name := processEnv.Child(); name != "" {
		processRank(t, name)
		return
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	for _, pc := range processCases() {
		t.Run(pc.name, func(t *testing.T) {
			c := pc.cfg()
			compareRanks(t, c, processEnv.Launch(t, "TestProcessEquivalence", pc.name, c.world))
		})
	}
}

// processRank is the body of one rank process: it runs the named case's
// rank over the job's process group and saves the final parameters.
func processRank(t *testing.T, name string) {
	var pc *processCase
	for _, c := range processCases() {
		if c.name == name {
			pc = &c
		}
	}
	if pc == nil {
		t.Fatalf("no process case %q", name)
	}
	c := pc.cfg()
	processEnv.Rank(t, pc.transport, func(_ context.Context, pg distributed.ProcessGroup) ([][]float32, error) {
		if pg.Size() != c.world {
			return nil, fmt.Errorf("world %d, case %q wants %d", pg.Size(), name, c.world)
		}
		params, _, err := c.rank(pg)
		return params, err
	})
}

// compareRanks checks every rank's parameters against the single-process
// reference (to float32 rounding) and against rank 0's (bitwise).
func compareRanks(t *testing.T, c trainCfg, got [][][]float32) {
	t.Helper()
	if c.accum == 0 {
		c.accum = 1
	}
	want := c.reference(t)
	init := dptest.Params(c.net(100))
	moved, worst := 0.0, 0.0
	for r := range got {
		if len(got[r]) != len(want) {
			t.Fatalf("rank %d has %d parameters, want %d", r, len(got[r]), len(want))
		}
		for i := range want {
			if len(got[r][i]) != len(want[i]) {
				t.Fatalf("rank %d parameter %d has %d elements, want %d", r, i, len(got[r][i]), len(want[i]))
			}
			for j := range want[i] {
				g, w := float64(got[r][i][j]), float64(want[i][j])
				if d := math.Abs(g - w); d > 2e-5+1e-4*math.Abs(w) {
					t.Fatalf("rank %d parameter %d element %d: DDP %g, single process %g", r, i, j, g, w)
				} else {
					worst = math.Max(worst, d)
				}
				if got[r][i][j] != got[0][i][j] {
					t.Fatalf("rank %d parameter %d element %d: %g differs from rank 0's %g (replicas diverged)", r, i, j, got[r][i][j], got[0][i][j])
				}
				moved = math.Max(moved, math.Abs(w-float64(init[i][j])))
			}
		}
	}
	if moved < 1e-3 {
		t.Fatalf("training moved parameters by at most %g: the comparison proves nothing", moved)
	}
	t.Logf("max |DDP − single process| %.2g; parameters moved up to %.2g", worst, moved)
}
