package zero

import (
	"context"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/internal/proctest"
)

// A subset of the equivalence tests with the ranks as real processes
// (copies of this test binary started by the launcher, over TCP or shared
// memory), as ddp's process tests do.

var processEnv = proctest.Env{Case: "COHORT_ZERO_TEST_PROCESS_CASE", Out: "COHORT_ZERO_TEST_PROCESS_OUT"}

type processCase struct {
	proctest.Case
	workload int // index into workloads()
	stage    Stage
}

var processCases = []processCase{
	{proctest.Case{Name: "cnn/zero2/world=2/tcp", World: 2, Transport: "tcp"}, 1, Stage2},
	{proctest.Case{Name: "gpt-mini/zero1/world=3/shm", World: 3, Transport: "shm"}, 2, Stage1},
}

const processSteps = 3

func TestProcessEquivalence(t *testing.T) {
	proctest.Equivalence(t, processEnv, "TestProcessEquivalence", processCases,
		func(ctx context.Context, pg distributed.ProcessGroup, pc processCase) ([][]float32, error) {
			params, _, err := trainZero(ctx, workloads()[pc.workload], pg, Options{Stage: pc.stage}, processSteps, false)
			return params, err
		},
		func(t *testing.T, pc processCase) [][]float32 {
			return reference(t, workloads()[pc.workload], processSteps)
		},
		dptest.CompareNorms)
}
