package zero

import (
	"context"
	"slices"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/proctest"
)

// A subset of the equivalence tests with the ranks as real processes
// (copies of this test binary started by the launcher, over TCP or shared
// memory), as ddp's process tests do.

var processEnv = proctest.Env{Case: "COHORT_ZERO_TEST_PROCESS_CASE", Out: "COHORT_ZERO_TEST_PROCESS_OUT"}

type processCase struct {
	name      string
	workload  int // index into workloads()
	stage     Stage
	world     int
	transport string
}

var processCases = []processCase{
	{"cnn/zero2/world=2/tcp", 1, Stage2, 2, "tcp"},
	{"gpt-mini/zero1/world=3/shm", 2, Stage1, 3, "shm"},
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
			params, _, err := trainZero(ctx, workloads()[pc.workload], pg, Options{Stage: pc.stage}, processSteps, false)
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
