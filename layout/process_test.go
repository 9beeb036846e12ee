package layout_test

import (
	"context"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/proctest"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/models/gpttest"
)

// The equality with one process again, with the ranks as real processes:
// copies of this test binary started by the launcher, talking over TCP or
// shared memory. Every rank writes its run (losses, norms, gathered gradients
// and parameters, eval loss) to a file; the parent compares it with one
// process.

var processEnv = proctest.Env{Case: "COHORT_LAYOUT_TEST_PROCESS_CASE", Out: "COHORT_LAYOUT_TEST_PROCESS_OUT"}

type processCase struct {
	proctest.Case
	cfg layout.Config
}

const processSteps, processT = 3, 16

var processCases = []processCase{
	{proctest.Case{Name: "pp=2xtp=2/1f1b/tcp", World: 4, Transport: "tcp"}, layout.Config{PP: 2, TP: 2, Microbatches: 2, Schedule: "1f1b", Batch: 4, SeqLen: processT}},
	{proctest.Case{Name: "dp=2xpp=2/zb/shm", World: 4, Transport: "shm"}, layout.Config{DP: 2, PP: 2, Microbatches: 2, Schedule: "zb", Batch: 2, SeqLen: processT}},
}

func TestProcessEquality(t *testing.T) {
	proctest.Run(t, processEnv, processCases, processRank, func(t *testing.T, pc processCase) {
		global := max(pc.cfg.DP, 1) * pc.cfg.Batch
		batches := gpttest.MakeBatches(processSteps, global, processT, models.GPTMini().Vocab)
		ref := gpttest.TrainReference(t, models.GPTMini(), batches, global, processT)
		s := proctest.LaunchOf[gpttest.Saved](t, processEnv, "TestProcessEquality", pc.Name, pc.World, proctest.Long)[0]
		compare(t, 0, s.Run(), ref)
	})
}

// processRank is the body of one rank process.
func processRank(t *testing.T, pc processCase) {
	proctest.RankOf(t, processEnv, pc.Transport, proctest.Long, func(ctx context.Context, pg distributed.ProcessGroup) (gpttest.Saved, error) {
		global := max(pc.cfg.DP, 1) * pc.cfg.Batch
		r, err := trainLayout(ctx, pg, pc.cfg, gpttest.MakeBatches(processSteps, global, processT, models.GPTMini().Vocab))
		return r.Save(), err
	})
}
