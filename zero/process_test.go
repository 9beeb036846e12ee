package zero

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"cohort/dist"
	"cohort/dist/rendezvous"
	"cohort/launch"
)

// A subset of the equivalence tests with the ranks as real processes
// (copies of this test binary started by the launcher, over TCP or shared
// memory), as ddp's process tests do.

const (
	processCaseEnv = "COHORT_ZERO_TEST_PROCESS_CASE"
	processOutEnv  = "COHORT_ZERO_TEST_PROCESS_OUT"
)

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
	if name := os.Getenv(processCaseEnv); name != "" {
		processRank(t, name)
		return
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	for _, pc := range processCases {
		t.Run(pc.name, func(t *testing.T) {
			dir := t.TempDir()
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := launch.Run(ctx, launch.Config{
				NProcPerNode: pc.world,
				Program:      os.Args[0],
				Args:         []string{"-test.run=^TestProcessEquivalence$", "-test.timeout=1m"},
				Env:          append(os.Environ(), processCaseEnv+"="+pc.name, processOutEnv+"="+dir),
				Stdout:       &out,
				Stderr:       &out,
			})
			if err != nil {
				t.Fatalf("ranks failed: %v\nrank output:\n%s", err, out.String())
			}
			want := reference(t, workloads()[pc.workload], processSteps)
			var rank0 [][]float32
			for r := range pc.world {
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.gob", r)))
				if err != nil {
					t.Fatalf("rank %d wrote no parameters: %v\nrank output:\n%s", r, err, out.String())
				}
				var got [][]float32
				if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&got); err != nil {
					t.Fatalf("rank %d's parameters: %v", r, err)
				}
				if err := compareNorm(got, want); err != nil {
					t.Errorf("rank %d vs one process: %v", r, err)
				}
				if r == 0 {
					rank0 = got
				} else if !slices.EqualFunc(got, rank0, slices.Equal) {
					t.Errorf("rank %d's parameters differ from rank 0's (replicas diverged)", r)
				}
			}
		})
	}
}

// processRank is one rank process of the named case.
func processRank(t *testing.T, name string) {
	i := slices.IndexFunc(processCases, func(c processCase) bool { return c.name == name })
	if i < 0 {
		t.Fatalf("no process case %q", name)
	}
	pc := processCases[i]
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := dist.InitFromInfo(ctx, info, dist.Options{Transport: pc.transport, Group: dist.GroupOptions{Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	params, _, err := trainZero(ctx, workloads()[pc.workload], pg, Options{Stage: pc.stage}, processSteps, false)
	if err != nil {
		t.Fatalf("rank %d: %v", pg.Rank(), err)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(params); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(os.Getenv(processOutEnv), fmt.Sprintf("rank%d.gob", pg.Rank())), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pg.Barrier(ctx).Wait(); err != nil { // leave together
		t.Fatal(err)
	}
}
