package pipeline

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/launch"
)

// The equality again with the stages as real processes: copies of this
// test binary started by the launcher, talking over TCP. Each rank writes
// its parameters and losses to a file; the parent compares them with one
// process.

const (
	processCaseEnv = "COHORT_PIPELINE_TEST_PROCESS_CASE"
	processOutEnv  = "COHORT_PIPELINE_TEST_PROCESS_OUT"
)

func processCases() []trainCfg {
	base := trainCfg{stages: 2, virtual: 1, microbatches: 4, steps: 3, batch: 8, seqLen: 32}
	one, zb, inter := base, base, base
	one.schedule, zb.schedule, inter.schedule, inter.virtual = "1f1b", "zb", "interleaved", 2
	return []trainCfg{one, zb, inter}
}

func TestProcessEquivalence(t *testing.T) {
	if name := os.Getenv(processCaseEnv); name != "" {
		processRank(t, name)
		return
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	for _, c := range processCases() {
		t.Run(c.String()+"/tcp", func(t *testing.T) {
			dir := t.TempDir()
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := launch.Run(ctx, launch.Config{
				NProcPerNode: c.stages,
				Program:      os.Args[0],
				Args:         []string{"-test.run=^TestProcessEquivalence$", "-test.timeout=1m"},
				Env:          append(os.Environ(), processCaseEnv+"="+c.String(), processOutEnv+"="+dir),
				Stdout:       &out,
				Stderr:       &out,
			})
			if err != nil {
				t.Fatalf("ranks failed: %v\nrank output:\n%s", err, out.String())
			}
			runs := make([]rankRun, c.stages)
			for r := range runs {
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.gob", r)))
				if err != nil {
					t.Fatalf("rank %d wrote nothing: %v\nrank output:\n%s", r, err, out.String())
				}
				var saved savedRun
				if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&saved); err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				runs[r] = rankRun{params: saved.Params, losses: saved.Losses}
			}
			ref, losses := reference(t, c)
			compare(t, ref, losses, runs)
		})
	}
}

type savedRun struct {
	Params map[string][]float32
	Losses []float64
}

// processRank is one rank process: it trains its stages over the job's
// process group (TCP) and saves what it ends with.
func processRank(t *testing.T, name string) {
	var c *trainCfg
	for _, pc := range processCases() {
		if pc.String() == name {
			c = &pc
		}
	}
	if c == nil {
		t.Fatalf("no process case %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := distributed.InitFromInfo(ctx, info, distributed.Options{Transport: "tcp", Group: distributed.GroupOptions{Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	run, err := trainRank(ctx, pg, *c)
	if err != nil {
		t.Fatalf("rank %d: %v", pg.Rank(), err)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(savedRun{run.params, run.losses}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(os.Getenv(processOutEnv), fmt.Sprintf("rank%d.gob", pg.Rank())), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// Leave together: no rank closes its links while another still reads.
	if err := pg.Barrier(ctx).Wait(); err != nil {
		t.Fatal(err)
	}
}
