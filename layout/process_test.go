package layout_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/launch"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/tensor"
)

// The equality with one process again, with the ranks as real processes:
// copies of this test binary started by the launcher, talking over TCP or
// shared memory. Rank 0 writes its run (losses, norms, gathered gradients
// and parameters, eval loss) to a file; the parent compares it with one
// process.

const (
	processCaseEnv = "COHORT_LAYOUT_TEST_PROCESS_CASE"
	processOutEnv  = "COHORT_LAYOUT_TEST_PROCESS_OUT"
)

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

// savedRun is run in a gob-friendly form.
type savedRun struct {
	Losses, Norms []float64
	Grads, Final  map[string][]float32
	Shapes        map[string][]int
	Eval          float64
}

func TestProcessEquality(t *testing.T) {
	if name := os.Getenv(processCaseEnv); name != "" {
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
			batches := makeBatches(processSteps, global, processT, models.GPTMini().Vocab)
			ref := trainReference(t, batches, global, processT)
			dir := t.TempDir()
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err := launch.Run(ctx, launch.Config{
				NProcPerNode: world,
				Program:      os.Args[0],
				Args:         []string{"-test.run=^TestProcessEquality$", "-test.timeout=2m"},
				Env:          append(os.Environ(), processCaseEnv+"="+pc.name, processOutEnv+"="+dir),
				Stdout:       &out,
				Stderr:       &out,
			})
			if err != nil {
				t.Fatalf("ranks failed: %v\nrank output:\n%s", err, out.String())
			}
			b, err := os.ReadFile(filepath.Join(dir, "rank0.gob"))
			if err != nil {
				t.Fatalf("rank 0 wrote nothing: %v\nrank output:\n%s", err, out.String())
			}
			var s savedRun
			if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&s); err != nil {
				t.Fatal(err)
			}
			got := run{losses: s.Losses, norms: s.Norms, eval: s.Eval, grads: map[string]*tensor.Tensor{}, final: map[string]*tensor.Tensor{}}
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
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := distributed.InitFromInfo(ctx, info, distributed.Options{Transport: pc.transport, Group: distributed.GroupOptions{Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	global := max(pc.cfg.DP, 1) * pc.cfg.Batch
	batches := makeBatches(processSteps, global, processT, models.GPTMini().Vocab)
	r, err := trainLayout(ctx, pg, pc.cfg, batches)
	if err != nil {
		t.Fatalf("rank %d: %v", pg.Rank(), err)
	}
	if pg.Rank() == 0 {
		s := savedRun{Losses: r.losses, Norms: r.norms, Eval: r.eval, Grads: map[string][]float32{}, Final: map[string][]float32{}, Shapes: map[string][]int{}}
		for name, g := range r.grads {
			s.Grads[name] = g.Contiguous().Data()
			s.Final[name] = r.final[name].Contiguous().Data()
			s.Shapes[name] = g.Shape()
		}
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(s); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(os.Getenv(processOutEnv), "rank0.gob"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Leave together: no rank closes its links while another still reads.
	if err := pg.Barrier(ctx).Wait(); err != nil {
		t.Fatal(err)
	}
}
