package tp_test

import (
	"context"
	"testing"
	"time"

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

// processTimeouts allows GPT-mini steps on a loaded machine.
var processTimeouts = proctest.Timeouts{Launch: 2 * time.Minute, Rank: 90 * time.Second, Op: time.Minute}

type processCase struct {
	name      string
	transport string
	dp, tp    int
}

var processCases = []processCase{
	{"tp=2/tcp", "tcp", 1, 2},
	{"dp=2xtp=2/shm", "shm", 2, 2},
}

const processSteps, processB, processT = 4, 4, 32

func TestProcessEquality(t *testing.T) {
	if name := processEnv.Child(); name != "" {
		processRank(t, name)
		return
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	cfg := models.GPTMini()
	batches := gpttest.MakeBatches(processSteps, processB, processT, cfg.Vocab)
	ref := gpttest.TrainReference(t, cfg, batches, processB, processT)
	for _, pc := range processCases {
		t.Run(pc.name, func(t *testing.T) {
			s := proctest.LaunchOf[gpttest.Saved](t, processEnv, "TestProcessEquality", pc.name, pc.dp*pc.tp, processTimeouts)[0]
			gpttest.Compare(t, 0, s.Run(), ref, false)
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
