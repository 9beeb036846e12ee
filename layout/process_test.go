package layout_test

import (
	"context"
	"testing"
	"time"

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

// processTimeouts allows GPT-mini steps on a loaded machine.
var processTimeouts = proctest.Timeouts{Launch: 2 * time.Minute, Rank: 90 * time.Second, Op: time.Minute}

type processCase struct {
	name      string
	transport string
	cfg       layout.Config
}

const processSteps, processT = 3, 16

var processCases = []processCase{
	{"pp=2xtp=2/1f1b/tcp", "tcp", layout.Config{PP: 2, TP: 2, Microbatches: 2, Schedule: "1f1b", Batch: 4, SeqLen: processT}},
	{"dp=2xpp=2/zb/shm", "shm", layout.Config{DP: 2, PP: 2, Microbatches: 2, Schedule: "zb", Batch: 2, SeqLen: processT}},
}

func TestProcessEquality(t *testing.T) {
	if name := processEnv.Child(); name != "" {
		processRank(t, name)
		return
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	for _, pc := range processCases {
		t.Run(pc.name, func(t *testing.T) {
			world := max(pc.cfg.DP, 1) * max(pc.cfg.PP, 1) * max(pc.cfg.TP, 1)
			global := max(pc.cfg.DP, 1) * pc.cfg.Batch
			batches := gpttest.MakeBatches(processSteps, global, processT, models.GPTMini().Vocab)
			ref := gpttest.TrainReference(t, models.GPTMini(), batches, global, processT)
			s := proctest.LaunchOf[gpttest.Saved](t, processEnv, "TestProcessEquality", pc.name, world, processTimeouts)[0]
			compare(t, 0, s.Run(), ref)
		})
	}
}

// processRank is the body of one rank process.
func processRank(t *testing.T, name string) {
	var pc *processCase
	for i := range processCases {
		if processCases[i].name == name {
			pc = &processCases[i]
		}
	}
	if pc == nil {
		t.Fatalf("no process case %q", name)
	}
	proctest.RankOf(t, processEnv, pc.transport, processTimeouts, func(ctx context.Context, pg distributed.ProcessGroup) (gpttest.Saved, error) {
		global := max(pc.cfg.DP, 1) * pc.cfg.Batch
		r, err := trainLayout(ctx, pg, pc.cfg, gpttest.MakeBatches(processSteps, global, processT, models.GPTMini().Vocab))
		return r.Save(), err
	})
}
