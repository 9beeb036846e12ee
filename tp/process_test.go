package tp_test

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
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/tensor"
)

// The equality with one process again, with the ranks as real processes:
// copies of this test binary started by the launcher, talking over TCP or
// shared memory. Rank 0 writes its run (losses, norms, gathered gradients
// and parameters) to a file; the parent compares it with one process.

const (
	processCaseEnv = "COHORT_TP_TEST_PROCESS_CASE"
	processOutEnv  = "COHORT_TP_TEST_PROCESS_OUT"
)

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
	if name := os.Getenv(processCaseEnv); name != "" {
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
			dir := t.TempDir()
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err := launch.Run(ctx, launch.Config{
				NProcPerNode: pc.dp * pc.tp,
				Program:      os.Args[0],
				Args:         []string{"-test.run=^TestProcessEquality$", "-test.timeout=2m"},
				Env:          append(os.Environ(), processCaseEnv+"="+pc.name, processOutEnv+"="+dir),
				Stdout:       &out,
				Stderr:       &out,
			})
			if err != nil {
				t.Fatalf("ranks failed: %v\nrank output:\n%s", err, out.String())
			}
			f, err := os.Open(filepath.Join(dir, "rank0.gob"))
			if err != nil {
				t.Fatalf("rank 0 wrote nothing: %v\nrank output:\n%s", err, out.String())
			}
			defer f.Close()
			var s savedRun
			if err := gob.NewDecoder(f).Decode(&s); err != nil {
				t.Fatal(err)
			}
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
	mesh, err := distributed.NewMesh(ctx, pg, distributed.MeshDim{Name: "dp", Size: pc.dp}, distributed.MeshDim{Name: "tp", Size: pc.tp})
	if err != nil {
		t.Fatal(err)
	}
	var dpg distributed.ProcessGroup
	if pc.dp > 1 {
		dpg = mesh.Group("dp")
	}
	cfg := models.GPTMini()
	batches := makeBatches(processSteps, processB, processT, cfg.Vocab)
	r := trainTP(t, ctx, mesh.Group("tp"), dpg, cfg, batches, processB, processT)
	if pg.Rank() == 0 {
		s := savedRun{Losses: r.losses, Norms: r.norms, Grads: map[string][]float32{}, Final: map[string][]float32{}, Shapes: map[string][]int{}}
		for name, g := range r.grads {
			s.Grads[name] = g.Contiguous().Data()
			s.Final[name] = r.final[name].Contiguous().Data()
			s.Shapes[name] = g.Shape()
		}
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(s); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(os.Getenv(processOutEnv), fmt.Sprintf("rank%d.gob", pg.Rank())), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Leave together: no rank closes its links while another still reads.
	if err := pg.Barrier(ctx).Wait(); err != nil {
		t.Fatal(err)
	}
}
