package fsdp

import (
	"context"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/internal/proctest"
)

// A subset of the equivalence tests with the ranks as real processes
// (copies of this test binary started by the launcher, over TCP or shared
// memory), as ddp's and zero's process tests do.

var processEnv = proctest.Env{Case: "COHORT_FSDP_TEST_PROCESS_CASE", Out: "COHORT_FSDP_TEST_PROCESS_OUT"}

type processCase struct {
	proctest.Case
	workload int // index into workloads()
}

var processCases = []processCase{
	{proctest.Case{Name: "gpt-mini/world=2/tcp", World: 2, Transport: "tcp"}, 2},
	{proctest.Case{Name: "cnn/world=3/shm", World: 3, Transport: "shm"}, 1},
}

const processSteps = 3

func TestProcessEquivalence(t *testing.T) {
	proctest.Equivalence(t, processEnv, "TestProcessEquivalence", processCases,
		func(ctx context.Context, pg distributed.ProcessGroup, pc processCase) ([][]float32, error) {
			params, _, err := trainFSDP(ctx, workloads()[pc.workload], pg, processSteps, Options{})
			return params, err
		},
		func(t *testing.T, pc processCase) [][]float32 {
			return reference(t, workloads()[pc.workload], processSteps)
		},
		dptest.CompareNorms)
}
