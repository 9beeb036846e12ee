package tp_test

import (
	"context"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/proctest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/tensor"
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

// savedRun is run in a gob-friendly form.
type savedRun struct {
	Losses, Norms []float64
	Grads, Final  map[string][]float32
	Shapes        map[string][]int
}

func TestProcessEquality(t *testing.T) {
	if name := processEnv.Child(); name != "" {
		processRank(t, name)
		return
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	cfg := models.GPTMini()
	batches := makeBatches(processSteps, processB, processT, cfg.Vocab)
	ref := trainReference(t, cfg, batches, processB, processT)
	for _, pc := range processCases {
		t.Run(pc.name, func(t *testing.T) {
			s := proctest.LaunchOf[savedRun](t, processEnv, "TestProcessEquality", pc.name, pc.dp*pc.tp, processTimeouts)[0]
			got := run{losses: s.Losses, norms: s.Norms, grads: map[string]*tensor.Tensor{}, final: map[string]*tensor.Tensor{}}
			for name, v := range s.Grads {
				got.grads[name] = tensor.FromSlice(v, s.Shapes[name]...)
				got.final[name] = tensor.FromSlice(s.Final[name], s.Shapes[name]...)
			}
			compare(t, 0, got, ref)
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
	proctest.RankOf(t, processEnv, pc.transport, processTimeouts, func(ctx context.Context, pg distributed.ProcessGroup) (savedRun, error) {
		mesh, err := distributed.NewMesh(ctx, pg, distributed.MeshDim{Name: "dp", Size: pc.dp}, distributed.MeshDim{Name: "tp", Size: pc.tp})
		if err != nil {
			return savedRun{}, err
		}
		var dpg distributed.ProcessGroup
		if pc.dp > 1 {
			dpg = mesh.Group("dp")
		}
		cfg := models.GPTMini()
		batches := makeBatches(processSteps, processB, processT, cfg.Vocab)
		r := trainTP(t, ctx, mesh.Group("tp"), dpg, cfg, batches, processB, processT)
		s := savedRun{Losses: r.losses, Norms: r.norms, Grads: map[string][]float32{}, Final: map[string][]float32{}, Shapes: map[string][]int{}}
		for name, g := range r.grads {
			s.Grads[name] = g.Contiguous().Data()
			s.Final[name] = r.final[name].Contiguous().Data()
			s.Shapes[name] = g.Shape()
		}
		return s, nil
	})
}
