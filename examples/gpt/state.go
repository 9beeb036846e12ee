package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/cohortml/cohort/checkpoint"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/tensor"
)

// A checkpoint (package checkpoint) holds the job's whole training state,
// whatever its layout, written by rank 0:
//
//	model/<name>             the weights, by PyTorch name (checkpoint.GPTNames)
//	exp_avg/<name>           AdamW's first moment of each parameter
//	exp_avg_sq/<name>        and its second moment
//	meta "job"               what must match to resume (see job)
//	meta "data"              windowStream steps drawn (the data position)
//
// and the checkpoint's step, which is also AdamW's step count.

// job is what a checkpoint must agree with to be resumed: the same model,
// seed and data stream. The pipeline and tensor-parallel sizes and the
// schedule may change.
type job struct {
	Model models.GPTConfig `json:"model"`
	Seed  uint64           `json:"seed"`
	Batch int              `json:"batch"` // per data-parallel replica
	DP    int              `json:"dp"`
}

func jobOf(c config) job { return job{Model: c.model, Seed: c.seed, Batch: c.batch, DP: c.dp} }

// resumed is the state read from a checkpoint.
type resumed struct {
	dir              string
	step, dataSteps  int64
	expAvg, expAvgSq map[string]*tensor.Tensor
}

// openLatest loads the newest complete checkpoint in c.ckptDir, if any,
// into model (the whole model, before any sharding) and returns the rest
// of its state; nil when there is none. Every rank reads it. skipped
// lists the newer step directories passed over, with the reason.
//
// Every rank opens the checkpoint before newTrainer, which no rank passes
// before all have arrived, so no rank can have saved a newer one in
// between and all load the same.
func openLatest(c config, model *models.GPT) (r *resumed, skipped []checkpoint.Skipped, err error) {
	if c.ckptDir == "" {
		return nil, nil, nil
	}
	path, _, skipped, err := checkpoint.Find(c.ckptDir)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		return nil, skipped, nil
	}
	if err != nil {
		return nil, skipped, err
	}
	r, err = openCheckpoint(c, model, path)
	return r, skipped, err
}

// openCheckpoint loads the checkpoint at path (see openLatest).
func openCheckpoint(c config, model *models.GPT, path string) (*resumed, error) {
	ck, err := checkpoint.Open(path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	var saved job
	if err := ck.Meta("job", &saved); err != nil {
		return nil, err
	}
	if want := jobOf(c); saved != want {
		return nil, fmt.Errorf("checkpoint %s is of another run: %+v, this run is %+v (use another -checkpoint-dir)", path, saved, want)
	}
	r := &resumed{dir: path, step: ck.Step(), expAvg: map[string]*tensor.Tensor{}, expAvgSq: map[string]*tensor.Tensor{}}
	if err := ck.Meta("data", &r.dataSteps); err != nil {
		return nil, err
	}
	if err := ck.LoadModule("model", model, checkpoint.GPTNames); err != nil {
		return nil, err
	}
	for _, p := range model.NamedParameters() {
		key := checkpoint.GPTNames(p.Name)
		if r.expAvg[p.Name], err = ck.Tensor("exp_avg/" + key); err != nil {
			return nil, err
		}
		if r.expAvgSq[p.Name], err = ck.Tensor("exp_avg_sq/" + key); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// saveCheckpoint writes the training state after step (dataSteps steps of
// the window stream drawn) into c.ckptDir. It is collective: every rank
// gathers the state (full holds the whole model afterwards) and rank 0
// writes it.
func saveCheckpoint(ctx context.Context, c config, pg distributed.ProcessGroup, tr trainer, full *models.GPT, step int, dataSteps int64) error {
	if err := tr.gather(ctx, full); err != nil {
		return err
	}
	expAvg, expAvgSq, err := tr.moments(ctx)
	if err != nil {
		return err
	}
	s := &checkpoint.Snapshot{Step: int64(step), Meta: map[string]any{"job": jobOf(c), "data": dataSteps}}
	if pg.Rank() == 0 { // the state is whole on every rank: one copy is enough
		s.AddModule("model", full, checkpoint.GPTNames)
		for _, p := range full.NamedParameters() {
			key := checkpoint.GPTNames(p.Name)
			for _, t := range []struct {
				prefix string
				v      *tensor.Tensor
			}{{"exp_avg/", expAvg[p.Name]}, {"exp_avg_sq/", expAvgSq[p.Name]}} {
				v := t.v.Contiguous()
				s.Shards = append(s.Shards, checkpoint.Shard{Name: t.prefix + key, FullShape: v.Shape(), Data: v.Data()})
			}
		}
	}
	g := checkpoint.NewGroup(pg.Rank(), pg.Size(), func(ctx context.Context) error { return pg.Barrier(ctx).Wait() })
	_, err = checkpoint.Save(ctx, c.ckptDir, g, s, checkpoint.Options{Keep: c.ckptKeep})
	return err
}

// saveWeights gathers the final weights into full and rank 0 writes them
// to c.save with PyTorch's names. It is collective.
func saveWeights(ctx context.Context, c config, pg distributed.ProcessGroup, tr trainer, full *models.GPT) error {
	if err := tr.gather(ctx, full); err != nil {
		return err
	}
	if pg.Rank() != 0 {
		return nil
	}
	return checkpoint.SaveModel(c.save, full, checkpoint.GPTNames, map[string]string{"format": "pt"})
}
