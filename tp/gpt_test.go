package tp_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/models/gpttest"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tp"
)

// trainTP trains a tp.GPT over tpg on this rank's sequences of each
// global batch (all of them without data parallelism); with dpg, the
// gradients are averaged over the data-parallel ranks before clipping.
// It returns the losses (averaged over dpg), the gathered gradients of
// the first step and the gathered final parameters.
func trainTP(t *testing.T, ctx context.Context, tpg, dpg distributed.ProcessGroup, cfg models.GPTConfig, batches []gpttest.Batch, B, T int) gpttest.Run {
	t.Helper()
	full := gpttest.NewGPT(t, cfg)
	m, err := tp.NewGPT(tpg, full)
	if err != nil {
		t.Fatal(err)
	}
	// Sharding then gathering gives back the full model exactly.
	sd, err := m.FullStateDict(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range nn.StateDict(full) {
		if d := gpttest.MaxDiff(sd[name], v); d != 0 {
			t.Errorf("gathered %s differs from the full model by %g before training", name, d)
		}
	}
	params := nn.Parameters(m)
	opt := gpttest.NewAdamW(t, params)
	lo, hi := 0, B
	if dpg != nil {
		lo, hi = dpg.Rank()*B/dpg.Size(), (dpg.Rank()+1)*B/dpg.Size()
	}
	var r gpttest.Run
	for s, gb := range batches {
		b := gb.Rows(lo, hi, T)
		opt.ZeroGrad()
		logits, err := m.Forward(ctx, b.Idx, hi-lo, T)
		if err != nil {
			t.Fatal(err)
		}
		loss, err := m.Loss(ctx, logits, b.Tgt)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(loss); err != nil {
			t.Fatal(err)
		}
		l := []float32{loss.Value.Item()}
		if dpg != nil {
			for _, p := range params {
				if err := dpg.AllReduce(ctx, distributed.FromTensor(p.Grad), distributed.Avg).Wait(); err != nil {
					t.Fatal(err)
				}
			}
			if err := dpg.AllReduce(ctx, distributed.F32(l), distributed.Avg).Wait(); err != nil {
				t.Fatal(err)
			}
		}
		if s == 0 {
			r.Grads = gatherGrads(t, ctx, m)
		}
		norm, err := m.ClipGradNorm(ctx, gpttest.ClipNorm)
		if err != nil {
			t.Fatal(err)
		}
		opt.Step()
		r.Losses = append(r.Losses, float64(l[0]))
		r.Norms = append(r.Norms, norm)
	}
	checkReplicas(t, ctx, m)
	if r.Final, err = m.FullStateDict(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkReplicas fails unless every replicated parameter is bitwise the
// same on every tensor-parallel rank (they get the same gradients, so they
// must never drift apart).
func checkReplicas(t *testing.T, ctx context.Context, m *tp.GPT) {
	t.Helper()
	pg := m.Comm().Group()
	for _, s := range m.Shards() {
		if s.Placement.Sharded {
			continue
		}
		v := s.Param.Value.Contiguous()
		all := tensor.New(append([]int{pg.Size()}, v.Shape()...)...)
		if err := pg.AllGather(ctx, distributed.FromTensor(all), distributed.FromTensor(v)).Wait(); err != nil {
			t.Fatal(err)
		}
		for r := range pg.Size() {
			if d := gpttest.MaxDiff(all.Select(0, r), v); d != 0 {
				t.Errorf("rank %d: replicated %s differs from tensor-parallel rank %d's by %g", pg.Rank(), s.Name, r, d)
			}
		}
	}
}

// gatherGrads gathers the full gradients of m, named as its parameters.
func gatherGrads(t *testing.T, ctx context.Context, m *tp.GPT) map[string]*tensor.Tensor {
	t.Helper()
	shards := m.Shards()
	for i := range shards {
		shards[i].Param = autograd.NewVar(shards[i].Param.Grad, false)
	}
	g, err := tp.FullStateDict(ctx, m.Comm(), shards)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGPTEqualsOneProcess: GPT-mini trained with tensor parallelism over
// in-process ranks equals one process within float32 rounding: the same
// losses, gradients and parameters.
func TestGPTEqualsOneProcess(t *testing.T) {
	cfg := models.GPTMini()
	for _, tc := range []struct {
		tp, steps, B, T int
	}{
		{tp: 2, steps: 20, B: 4, T: 64},
		{tp: 4, steps: 10, B: 2, T: 32},
		{tp: 1, steps: 2, B: 2, T: 16},
	} {
		t.Run(fmt.Sprintf("tp=%d/steps=%d/batch=%dx%d", tc.tp, tc.steps, tc.B, tc.T), func(t *testing.T) {
			batches := gpttest.MakeBatches(tc.steps, tc.B, tc.T, cfg.Vocab)
			ref := gpttest.TrainReference(t, cfg, batches, tc.B, tc.T)
			distributedtest.Run(t, tc.tp, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, 2*time.Minute)
				gpttest.Compare(t, pg.Rank(), trainTP(t, ctx, pg, nil, cfg, batches, tc.B, tc.T), ref, false)
			})
		})
	}
}

// TestDPxTP: a dp=2 × tp=2 mesh on 4 ranks, tp.GPT on the tp groups and
// gradients averaged over the dp groups, equals one process trained on the
// dp-global batch.
func TestDPxTP(t *testing.T) {
	cfg := models.GPTMini()
	const steps, B, T = 10, 4, 32 // B is the global batch: 2 sequences per dp rank
	batches := gpttest.MakeBatches(steps, B, T, cfg.Vocab)
	ref := gpttest.TrainReference(t, cfg, batches, B, T)
	distributedtest.Run(t, 4, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, 2*time.Minute)
		mesh, err := distributed.NewMesh(ctx, pg, distributed.MeshDim{Name: "dp", Size: 2}, distributed.MeshDim{Name: "tp", Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		gpttest.Compare(t, pg.Rank(), trainTP(t, ctx, mesh.Group("tp"), mesh.Group("dp"), cfg, batches, B, T), ref, false)
	})
}

// TestBadConfig: sizes that do not split across the tensor-parallel ranks
// get an error naming them.
func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  models.GPTConfig
		n    int
		want string
	}{
		{"heads", models.GPTMini(), 3, "4 heads do not split across 3 tensor-parallel ranks"},
		{"vocab", models.GPTConfig{Vocab: 250, Ctx: 8, NLayer: 1, D: 16, NHead: 4}, 4, "vocabulary 250 does not split across 4"},
		{"ranks", models.GPTMini(), 0, "0 tensor-parallel ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tp.CheckConfig(tc.cfg, tc.n)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckConfig(%+v, %d) = %v, want an error containing %q", tc.cfg, tc.n, err, tc.want)
			}
		})
	}
	t.Run("NewGPT", func(t *testing.T) {
		full := gpttest.NewGPT(t, models.GPTMini())
		distributedtest.Run(t, 3, func(t *testing.T, pg distributed.ProcessGroup) {
			if _, err := tp.NewGPT(pg, full); err == nil || !strings.Contains(err.Error(), "4 heads do not split across 3") {
				t.Errorf("rank %d: NewGPT over 3 ranks: %v", pg.Rank(), err)
			}
		})
	})
	t.Run("layers", func(t *testing.T) {
		distributedtest.Run(t, 4, func(t *testing.T, pg distributed.ProcessGroup) {
			c := tp.NewComm(pg)
			if _, err := tp.NewMLP(c, nn.NewMLP(rand.New(rand.NewPCG(1, 1)), 4, 6)); err == nil || !strings.Contains(err.Error(), "hidden width 6 does not split across 4") {
				t.Errorf("NewMLP: %v", err)
			}
			if _, err := tp.NewColumnParallelLinear(c, nn.NewLinear(rand.New(rand.NewPCG(1, 1)), 4, 6, true), false); err == nil || !strings.Contains(err.Error(), "6 output features") {
				t.Errorf("NewColumnParallelLinear: %v", err)
			}
			if _, err := tp.NewRowParallelLinear(c, nn.NewLinear(rand.New(rand.NewPCG(1, 1)), 6, 4, true), true); err == nil || !strings.Contains(err.Error(), "6 input features") {
				t.Errorf("NewRowParallelLinear: %v", err)
			}
			if _, err := tp.NewVocabEmbedding(c, tensor.New(10, 2)); err == nil || !strings.Contains(err.Error(), "vocabulary 10") {
				t.Errorf("NewVocabEmbedding: %v", err)
			}
		})
	})
}

// TestPeerFailure: when a tensor-parallel peer goes away, the other rank's
// Forward and Backward return an error naming the collective (never a
// hang), and the error sticks.
func TestPeerFailure(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	cfg := models.GPTConfig{Vocab: 16, Ctx: 8, NLayer: 1, D: 8, NHead: 2}
	full := gpttest.NewGPT(t, cfg)
	ids := make([]int64, 8)
	distributedtest.RunWith(t, 2, distributed.GroupOptions{Timeout: 10 * time.Second}, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, time.Minute)
		m, err := tp.NewGPT(pg, full)
		if err != nil {
			t.Fatal(err)
		}
		// One good step first.
		logits, err := m.Forward(ctx, ids, 1, 8)
		if err != nil {
			t.Fatal(err)
		}
		loss, err := m.Loss(ctx, logits, ids)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(loss); err != nil {
			t.Fatal(err)
		}
		if err := pg.Barrier(ctx).Wait(); err != nil {
			t.Fatal(err)
		}
		if pg.Rank() == 1 {
			pg.Close() // rank 1 dies
			return
		}
		_, err = m.Forward(ctx, ids, 1, 8)
		if err == nil || !strings.Contains(err.Error(), "tp: ") || !strings.Contains(err.Error(), "rank 0 of 2") {
			t.Fatalf("Forward after the peer left: %v", err)
		}
		if err2 := m.Comm().Err(); err2 != err {
			t.Errorf("Comm.Err() = %v, want the first error %v", err2, err)
		}
		t.Logf("rank 0: %v", err)
	})
}
