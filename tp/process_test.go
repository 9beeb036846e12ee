package tp_test

import (
	"context"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/proctest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/models/gpttest"
)

// The equality with one process again, with the ranks as real processes:
// copies of this test binary started by the launcher, talking over TCP or
// shared memory. Every rank writes its run (losses, norms, gathered gradients
// and parameters) to a file; the parent compares it with one process.

var processEnv = proctest.Env{Case: "COHORT_TP_TEST_PROCESS_CASE", Out: "COHORT_TP_TEST_PROCESS_OUT"}

type processCase struct {
	proctest.Case
	dp, tp int
}

var processCases = []processCase{
	{proctest.Case{Name: "tp=2/tcp", World: 2, Transport: "tcp"}, 1, 2},
	{proctest.Case{Name: "dp=2xtp=2/shm", World: 4, Transport: "shm"}, 2, 2},
}

const processSteps, processB, processT = 4, 4, 32

func TestProcessEquality(t *testing.T) {
	cfg := models.GPTMini()
	batches := gpttest.MakeBatches(processSteps, processB, processT, cfg.Vocab)
	var ref *gpttest.Run // trained once, for the first case the parent runs
	proctest.Run(t, processEnv, processCases, processRank, func(t *testing.T, pc processCase) {
		if ref == nil {
			r := gpttest.TrainReference(t, cfg, batches, processB, processT)
			ref = &r
		}
		s := proctest.LaunchOf[gpttest.Saved](t, processEnv, "TestProcessEquality", pc.Name, pc.World, proctest.Long)[0]
		gpttest.Compare(t, 0, s.Run(), *ref, false)
	})
}

// processRank is the body of one rank process.
func processRank(t *testing.T, pc processCase) {
	proctest.RankOf(t, processEnv, pc.Transport, proctest.Long, func(ctx context.Context, pg distributed.ProcessGroup) (gpttest.Saved, error) {
		mesh, err := distributed.NewMesh(ctx, pg, distributed.MeshDim{Name: "dp", Size: pc.dp}, distributed.MeshDim{Name: "tp", Size: pc.tp})
		if err != nil {
			return gpttest.Saved{}, err
		}
		var dpg distributed.ProcessGroup
		if pc.dp > 1 {
			dpg = mesh.Group("dp")
		}
		cfg := models.GPTMini()
		batches := gpttest.MakeBatches(processSteps, processB, processT, cfg.Vocab)
		r := trainTP(t, ctx, mesh.Group("tp"), dpg, cfg, batches, processB, processT)
		return r.Save(), nil
	})
}
