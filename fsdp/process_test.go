package fsdp

import (
	"context"
	"slices"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/proctest"
)

// A subset of the equivalence tests with the ranks as real processes
// (copies of this test binary started by the launcher, over TCP or shared
// memory), as ddp's and zero's process tests do.

var processEnv = proctest.Env{Case: "COHORT_FSDP_TEST_PROCESS_CASE", Out: "COHORT_FSDP_TEST_PROCESS_OUT"}

type processCase struct {
	name      string
	workload  int // index into workloads()
	world     int
	transport string
}

var processCases = []processCase{
	{"gpt-mini/world=2/tcp", 2, 2, "tcp"},
	{"cnn/world=3/shm", 1, 3, "shm"},
}

const processSteps = 3

func TestProcessEquivalence(t *testing.T) {
	if name := processEnv.Child(); name != "" {
		i := slices.IndexFunc(processCases, func(c processCase) bool { return c.name == name })
		if i < 0 {
			t.Fatalf("no process case %q", name)
		}
		pc := processCases[i]
		processEnv.Rank(t, pc.transport, func(ctx context.Context, pg distributed.ProcessGroup) ([][]float32, error) {
			params, _, err := trainFSDP(ctx, workloads()[pc.workload], pg, processSteps, Options{})
			return params, err
		})
		return
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	for _, pc := range processCases {
		t.Run(pc.name, func(t *testing.T) {
			got := processEnv.Launch(t, "TestProcessEquivalence", pc.name, pc.world)
			want := reference(t, workloads()[pc.workload], processSteps)
			for r := range got {
				if err := compareNorm(got[r], want); err != nil {
					t.Errorf("rank %d vs one process: %v", r, err)
				}
				if r > 0 && !slices.EqualFunc(got[r], got[0], slices.Equal) {
					t.Errorf("rank %d's parameters differ from rank 0's (replicas diverged)", r)
				}
			}
		})
	}
}
