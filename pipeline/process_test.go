package pipeline

import (
	"context"
	"slices"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/proctest"
)

// The equality again with the stages as real processes: copies of this
// test binary started by the launcher, talking over TCP. Each rank writes
// its parameters and losses to a file; the parent compares them with one
// process.

var processEnv = proctest.Env{Case: "COHORT_PIPELINE_TEST_PROCESS_CASE", Out: "COHORT_PIPELINE_TEST_PROCESS_OUT"}

func processCases() []trainCfg {
	base := trainCfg{stages: 2, virtual: 1, microbatches: 4, steps: 3, batch: 8, seqLen: 32}
	one, zb, inter := base, base, base
	one.schedule, zb.schedule, inter.schedule, inter.virtual = "1f1b", "zb", "interleaved", 2
	return []trainCfg{one, zb, inter}
}

func TestProcessEquivalence(t *testing.T) {
	if name := processEnv.Child(); name != "" {
		i := slices.IndexFunc(processCases(), func(c trainCfg) bool { return c.String() == name })
		if i < 0 {
			t.Fatalf("no process case %q", name)
		}
		proctest.RankOf(t, processEnv, "tcp", proctest.Short, func(ctx context.Context, pg distributed.ProcessGroup) (savedRun, error) {
			run, err := trainRank(ctx, pg, processCases()[i])
			return savedRun{run.params, run.losses}, err
		})
		return
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	for _, c := range processCases() {
		t.Run(c.String()+"/tcp", func(t *testing.T) {
			saved := proctest.LaunchOf[savedRun](t, processEnv, "TestProcessEquivalence", c.String(), c.stages, proctest.Short)
			runs := make([]rankRun, c.stages)
			for r, s := range saved {
				runs[r] = rankRun{params: s.Params, losses: s.Losses}
			}
			ref, losses := reference(t, c)
			compare(t, ref, losses, runs)
		})
	}
}

type savedRun struct {
	Params map[string][]float32
	Losses []float64
}
