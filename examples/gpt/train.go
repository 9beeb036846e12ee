package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/cohortml/cohort/checkpoint"
	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/device/cudatensor"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/warmheap"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/obs"
	"github.com/cohortml/cohort/obs/trace"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/recipe"
	"github.com/cohortml/cohort/recipe/parallel"
	"github.com/cohortml/cohort/tensor"
)

// train runs the job on this rank of pg; rank 0 reports to out. It
// returns this rank's loss curve.
func train(ctx context.Context, c config, pg distributed.ProcessGroup, out io.Writer) (cv curve, err error) {
	if err := c.validate(); err != nil {
		return cv, err
	}
	lay, err := c.layout(pg.Size())
	if err != nil {
		return cv, err
	}
	dev, err := cudatensor.Open(c.device)
	if err != nil {
		return cv, err
	}
	if !dev.IsCPU() && (lay.PP > 1 || lay.TP > 1) {
		return cv, fmt.Errorf("-device %v with %v: the pipeline and tensor-parallel layouts keep host buffers; on a device, use data parallelism (-dp)", dev, lay)
	}
	corpus, err := loadCorpus(ctx, c.data, c.model.Ctx)
	if err != nil {
		return cv, err
	}
	if windows := len(corpus.Train) - c.model.Ctx; c.batch*lay.DP > windows {
		return cv, fmt.Errorf("-batch %d × %d replicas: more windows a step than the %d the training text holds (%d bytes)", c.batch, lay.DP, max(windows, 0), len(corpus.Train))
	}
	rank, world := pg.Rank(), pg.Size()
	cv = curve{train: map[int]float64{}, val: map[int]float64{}}

	// Every rank builds the whole model from the same seed (or -init, or
	// the checkpoint it resumes from); par keeps this rank's part of it.
	model, err := models.NewGPT(rand.New(rand.NewPCG(c.seed, 0)), c.model)
	if err != nil {
		return cv, err
	}
	if c.init != "" {
		if err := checkpoint.LoadDump(c.init, model); err != nil {
			return cv, fmt.Errorf("-init: %w", err)
		}
	}
	job := job{Model: c.model, Seed: c.seed, Batch: c.batch, DP: lay.DP}
	resume, skipped, err := resumeFrom(c.ckptDir, job, model)
	if err != nil {
		return cv, err
	}
	nn.To(model, dev)
	if err := recipe.UseDType(model, c.dtype, rank, os.Stderr); err != nil {
		return cv, err
	}
	par, err := parallel.NewGPT(ctx, pg, model, lay)
	if err != nil {
		return cv, err
	}
	defer par.Close()
	opt, err := recipe.NewAdamW(par.Parameters())
	if err != nil {
		return cv, err
	}
	step := 0 // steps done
	if resume != nil {
		m1, m2 := opt.Moments()
		if err := par.LoadStateInto(resume.expAvg, m1); err != nil {
			return cv, fmt.Errorf("checkpoint %s: %w", resume.dir, err)
		}
		if err := par.LoadStateInto(resume.expAvgSq, m2); err != nil {
			return cv, fmt.Errorf("checkpoint %s: %w", resume.dir, err)
		}
		step = int(resume.step)
		opt.SetSteps(resume.step)
	}

	// Replica r of dp takes slice r of each step's draw of dp·batch windows.
	replica, replicas := par.Replica()
	stream, err := corpus.NewWindowStream(c.seed, replicas, replica, c.batch)
	if err != nil {
		return cv, err
	}
	if resume != nil {
		stream.Skip(resume.dataSteps)
	}
	tokens := replicas * c.batch * c.model.Ctx // the job's tokens per step

	watch, err := obs.Start(ctx, obs.FromEnv(c.getenv, obs.Options{Name: "gpt", TotalSteps: c.steps, Unit: "tokens",
		Rank: rank, WorldSize: world, Job: distributed.JobID(pg), Progress: out}))
	if err != nil {
		return cv, err
	}
	closeWatch := sync.OnceValue(watch.Close) // prints the progress line's last words
	defer closeWatch()
	out = watch.Out() // the progress line cleared around each line
	if rank == 0 {
		fmt.Fprintf(out, "GPT %d layers, width %d, %d heads, %d parameters; %s; %d replica(s) × batch %d × %d tokens; %d training, %d validation bytes\n",
			c.model.NLayer, c.model.D, c.model.NHead, nn.NumParameters(model), par, replicas, c.batch, c.model.Ctx, len(corpus.Train), len(corpus.Val))
		for _, sk := range skipped {
			fmt.Fprintf(out, "checkpoint skipped: %v\n", sk)
		}
		if resume != nil {
			fmt.Fprintf(out, "resumed at step %d from %s\n", step, resume.dir)
		}
	}
	spans := watch.Tracer()
	save := func(step int) error {
		if err := saveCheckpoint(ctx, c, pg, par, opt, model, job, step, stream.Steps()); err != nil {
			return fmt.Errorf("step %d: checkpoint: %w", step, err)
		}
		return nil
	}

	var x, y []int64
	var lossSum float64        // this rank's losses since the last log line
	var evalTime time.Duration // spent in intermediate validations and checkpoints
	first := step + 1
	// The heap is fitted to the step after the first few (fresh pages
	// are dear on some machines: internal/warmheap).
	heap := warmheap.NewLoop(warmheap.Options{})
	start, logStart := time.Now(), time.Now()
	for step < c.steps {
		step++
		timer := watch.StartStep() // traced: "step", "batch", the spans below
		x, y = stream.Next(x, y)
		timer.Loaded()
		end := spans.Begin(trace.Compute, "forward+backward").End
		loss, err := par.ForwardBackward(ctx, x, y)
		end()
		if err != nil {
			return cv, fmt.Errorf("step %d: %w", step, err)
		}
		end = spans.Begin(trace.Compute, "optimizer").End
		_, err = par.ClipGradNorm(ctx, recipe.ClipNorm)
		opt.Step()
		opt.ZeroGrad()
		end()
		if err != nil {
			return cv, fmt.Errorf("step %d: %w", step, err)
		}
		// Samples counts this rank's share of the job's tokens (the progress
		// line multiplies by the ranks); an epoch is len(Train) tokens drawn.
		epoch := 1 + (step-1)*tokens/max(len(corpus.Train), 1)
		timer.Done(obs.Step{Step: step - 1, Epoch: epoch, Loss: loss, Samples: tokens / world})
		lossSum += loss
		cv.train[step] = loss
		heap.Step()

		if step%c.logEvery == 0 || step == c.steps {
			n := min((step-1)%c.logEvery+1, step-first+1)
			// The mean over the ranks is the loss of the job's whole batch.
			mean := []float64{loss, lossSum / float64(n)}
			if err := pg.AllReduce(ctx, distributed.F64(mean), distributed.Avg).Wait(); err != nil {
				return cv, fmt.Errorf("step %d: averaging the loss over the ranks: %w", step, err)
			}
			if rank == 0 {
				fmt.Fprintf(out, "step %d: train loss %.4f, mean of steps %d–%d %.4f, %.0f tokens/s\n",
					step, mean[0], step-n+1, step, mean[1], float64(n*tokens)/time.Since(logStart).Seconds())
			}
			lossSum, logStart = 0, time.Now()
		}
		t := time.Now()
		validated := c.evalEvery > 0 && step%c.evalEvery == 0 && step < c.steps
		if validated {
			v, err := par.ValLoss(ctx, corpus)
			if err != nil {
				return cv, fmt.Errorf("step %d: validation: %w", step, err)
			}
			cv.val[step] = v
			if rank == 0 {
				fmt.Fprintf(out, "step %d: val loss %.4f\n", step, v)
			}
		}
		// A checkpoint every -checkpoint-every steps and at the end, or
		// when a signal stops the job.
		saving := c.ckptDir != "" && (step%c.ckptEvery == 0 || step == c.steps)
		if err := c.stop.AfterStep(ctx, pg, step, c.ckptDir, saving, func() error { return save(step) }); err != nil {
			return cv, err
		}
		if validated || saving {
			evalTime, logStart = evalTime+time.Since(t), time.Now() // not training throughput
		}
	}
	elapsed := time.Since(start) - evalTime
	v, err := par.ValLoss(ctx, corpus)
	if err != nil {
		return cv, fmt.Errorf("final validation: %w", err)
	}
	cv.val[c.steps] = v
	if c.save != "" {
		if err := par.GatherInto(ctx, model); err != nil {
			return cv, fmt.Errorf("-save: %w", err)
		}
		if rank == 0 {
			if err := checkpoint.SaveModel(c.save, model, checkpoint.GPTNames, map[string]string{"format": "pt"}); err != nil {
				return cv, fmt.Errorf("-save: %w", err)
			}
		}
	}
	// No rank leaves (closing its links) before every rank is done.
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return cv, fmt.Errorf("final barrier: %w", err)
	}
	if err := closeWatch(); err != nil { // before the result
		return cv, err
	}
	if rank == 0 {
		if c.save != "" {
			fmt.Fprintf(out, "weights saved to %s\n", c.save)
		}
		if done := c.steps - first + 1; done > 0 {
			fmt.Fprintf(out, "%d steps in %.1f s of training (%.0f tokens/s)\n", done, elapsed.Seconds(), float64(done*tokens)/elapsed.Seconds())
		}
		fmt.Fprintf(out, "val loss: %.4f\n", v)
	}
	return cv, nil
}

// curve is a rank's losses by step: every step's training loss (this
// rank's batch) and every validation's.
type curve struct{ train, val map[int]float64 }

// loadCorpus reads the text at path, or when path is "" the Opticks that
// datasets.OpticksPath finds, split 90/10 into windows of context bytes.
func loadCorpus(ctx context.Context, path string, context int) (*datasets.ByteCorpus, error) {
	if path == "" {
		p, err := datasets.OpticksPath(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w (name a text with -data or $OPTICKS)", err)
		}
		path = p
	}
	return datasets.LoadByteCorpus(path, context)
}

// A checkpoint holds the job's whole training state, whatever its layout,
// written by rank 0: "model/<name>" the weights by PyTorch name
// (checkpoint.GPTNames), "exp_avg/<name>" and "exp_avg_sq/<name>" AdamW's
// moments, meta "job" and "data" (window-stream steps drawn); its step is
// AdamW's step count.

// job is what a checkpoint must agree with to be resumed: the same model,
// seed and data stream; the pipeline and tensor sizes may change.
type job struct {
	Model models.GPTConfig `json:"model"`
	Seed  uint64           `json:"seed"`
	Batch int              `json:"batch"` // per data-parallel replica
	DP    int              `json:"dp"`
}

// resumed is the state read from a checkpoint, moments by parameter name.
type resumed struct {
	dir              string
	step, dataSteps  int64
	expAvg, expAvgSq map[string]*tensor.Tensor
}

// resumeFrom loads the newest complete checkpoint in dir (if any, else
// nil) into model, the whole model before any sharding, and returns the
// rest of its state. Every rank calls it before parallel.NewGPT, which no
// rank passes before all have arrived, so all load the same checkpoint.
func resumeFrom(dir string, job job, model *models.GPT) (*resumed, []checkpoint.Skipped, error) {
	ck, skipped, err := checkpoint.Resume(dir, job)
	if ck == nil || err != nil {
		return nil, skipped, err
	}
	defer ck.Close()
	r := &resumed{dir: ck.Dir, step: ck.Step(), expAvg: map[string]*tensor.Tensor{}, expAvgSq: map[string]*tensor.Tensor{}}
	if err := ck.Meta("data", &r.dataSteps); err != nil {
		return nil, skipped, err
	}
	if err := ck.LoadModule("model", model, checkpoint.GPTNames); err != nil {
		return nil, skipped, err
	}
	for _, p := range model.NamedParameters() {
		key := checkpoint.GPTNames(p.Name)
		if r.expAvg[p.Name], err = ck.Tensor("exp_avg/" + key); err != nil {
			return nil, skipped, err
		}
		if r.expAvgSq[p.Name], err = ck.Tensor("exp_avg_sq/" + key); err != nil {
			return nil, skipped, err
		}
	}
	return r, skipped, nil
}

// saveCheckpoint writes the training state after step into c.ckptDir. It
// is collective: every rank gathers the state (full holds the whole model
// afterwards) and rank 0 writes it.
func saveCheckpoint(ctx context.Context, c config, pg distributed.ProcessGroup, par *parallel.GPT, opt *optim.Adam, full *models.GPT, job job, step int, dataSteps int64) error {
	if err := par.GatherInto(ctx, full); err != nil {
		return err
	}
	m1, m2 := opt.Moments()
	expAvg, err := par.StateOf(ctx, m1)
	if err != nil {
		return err
	}
	expAvgSq, err := par.StateOf(ctx, m2)
	if err != nil {
		return err
	}
	s := &checkpoint.Snapshot{Step: int64(step), Meta: map[string]any{"job": job, "data": dataSteps}}
	if pg.Rank() == 0 { // the state is whole on every rank: one copy is enough
		s.AddModule("model", full, checkpoint.GPTNames)
		for _, p := range full.NamedParameters() {
			for i, v := range []*tensor.Tensor{expAvg[p.Name].Contiguous(), expAvgSq[p.Name].Contiguous()} {
				name := []string{"exp_avg/", "exp_avg_sq/"}[i] + checkpoint.GPTNames(p.Name)
				s.Shards = append(s.Shards, checkpoint.Shard{Name: name, FullShape: v.Shape(), Data: v.Data()})
			}
		}
	}
	g := checkpoint.NewGroup(pg.Rank(), pg.Size(), func(ctx context.Context) error { return pg.Barrier(ctx).Wait() })
	_, err = checkpoint.Save(ctx, c.ckptDir, g, s, checkpoint.Options{Keep: c.ckptKeep})
	return err
}
