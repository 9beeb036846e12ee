package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/cohortml/cohort/device/cudatensor"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/obs"
	"github.com/cohortml/cohort/obs/trace"
	"github.com/cohortml/cohort/recipe"
)

// errStopped ends a run at config.stopAfter, as a crash would.
var errStopped = errors.New("stopped after the requested number of steps")

// train runs the job on this rank of pg; rank 0 reports to out.
func train(ctx context.Context, c config, pg distributed.ProcessGroup, out io.Writer) error {
	if err := c.validate(); err != nil {
		return err
	}
	c, err := c.layout(pg.Size())
	if err != nil {
		return err
	}
	dev, err := cudatensor.Open(c.device)
	if err != nil {
		return err
	}
	if !dev.IsCPU() && pg.Size() > 1 {
		return fmt.Errorf("-device %v on %d ranks: ddp and the staged layouts keep host buffers; a device trains as a world of one for now", dev, pg.Size())
	}
	corpus, err := loadCorpus(ctx, c.data, c.model.Ctx)
	if err != nil {
		return err
	}
	if windows := len(corpus.Train) - c.model.Ctx; c.batch*c.dp > windows {
		return fmt.Errorf("-batch %d × %d replicas: more windows a step than the %d the training text holds (%d bytes)", c.batch, c.dp, max(windows, 0), len(corpus.Train))
	}
	rank, world := pg.Rank(), pg.Size()
	record := c.record
	if record == nil {
		record = func(string, int, float64) {}
	}

	// Every rank builds the whole model from the same seed (or -init, or
	// the checkpoint it resumes from); the trainer keeps this rank's part.
	model, err := models.NewGPT(rand.New(rand.NewPCG(c.seed, 0)), c.model)
	if err != nil {
		return err
	}
	if c.init != "" {
		if err := loadInit(model, c.init); err != nil {
			return err
		}
	}
	resume, skipped, err := openLatest(c, model)
	if err != nil {
		return err
	}
	nn.To(model, dev)
	if err := autocast(c.dtype, model, pg.Rank()); err != nil {
		return err
	}
	tr, err := newTrainer(ctx, c, pg, model)
	if err != nil {
		return err
	}
	defer tr.close()
	step := 0 // steps done
	if resume != nil {
		if err := tr.setMoments(resume.expAvg, resume.expAvgSq, resume.step); err != nil {
			return fmt.Errorf("checkpoint %s: %w", resume.dir, err)
		}
		step = int(resume.step)
	}

	// Replica r of dp takes slice r of each step's draw of dp·batch windows.
	replica, replicas := tr.replica()
	stream, err := corpus.NewWindowStream(c.seed, replicas, replica, c.batch)
	if err != nil {
		return err
	}
	if resume != nil {
		stream.Skip(resume.dataSteps)
	}
	tokens := replicas * c.batch * c.model.Ctx // the job's tokens per step

	// The progress line counts tokens; the program's lines go through it
	// (the bar is cleared around them) when both share an output.
	progressTo := c.progress
	if progressTo == nil {
		progressTo = out
	}
	watch, err := obs.Start(ctx, obs.FromEnv(os.Getenv, obs.Options{Name: "gpt", TotalSteps: c.steps, Unit: "tokens",
		Rank: rank, WorldSize: world, Job: distributed.JobID(pg), Progress: progressTo, NoProgress: c.progress == nil}))
	if err != nil {
		return err
	}
	closeWatch := sync.OnceValue(watch.Close) // prints the progress line's last words
	defer closeWatch()
	if progressTo == out {
		out = watch.Out()
	}
	if rank == 0 {
		fmt.Fprintf(out, "GPT %d layers, width %d, %d heads, %d parameters; %s; %d replica(s) × batch %d × %d tokens; %d training, %d validation bytes\n",
			c.model.NLayer, c.model.D, c.model.NHead, numParams(model), tr.describe(), replicas, c.batch, c.model.Ctx, len(corpus.Train), len(corpus.Val))
		for _, sk := range skipped {
			fmt.Fprintf(out, "checkpoint skipped: %v\n", sk)
		}
		if resume != nil {
			fmt.Fprintf(out, "resumed at step %d from %s\n", step, resume.dir)
		}
	}
	spans := watch.Tracer()

	var x, y []int64
	var lossSum float64        // this rank's losses since the last log line
	var evalTime time.Duration // spent in intermediate validations and checkpoints
	first := step + 1
	start, logStart := time.Now(), time.Now()
	for step < c.steps {
		step++
		t0 := time.Now()
		sp := spans.Begin(trace.Data, "batch")
		x, y = stream.Next(x, y)
		sp.End()
		t1 := time.Now()
		sp = spans.Begin(trace.Compute, "forward+backward")
		loss, err := tr.forwardBackward(ctx, x, y)
		sp.End()
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		sp = spans.Begin(trace.Compute, "optimizer")
		err = tr.update(ctx)
		sp.End()
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		// Samples counts tokens: this rank's share of the job's, so that the
		// progress line (which multiplies by the ranks) shows the job's tokens/s.
		// Epochs are passes over the training text, counted from 1 as in
		// examples/mnist (the windows are drawn at random, so a pass is
		// len(Train) tokens drawn, not each byte seen once).
		epoch := 1 + (step-1)*tokens/max(len(corpus.Train), 1)
		watch.Step(obs.Step{Step: step - 1, Epoch: epoch, Loss: loss, Samples: tokens / world, Duration: time.Since(t0),
			Compute: time.Since(t1), DataWait: t1.Sub(t0)})
		lossSum += loss
		record("train", step, loss)

		if step%c.logEvery == 0 || step == c.steps {
			n := min((step-1)%c.logEvery+1, step-first+1)
			// The mean over the ranks is the loss of the job's whole batch.
			mean, err := meanOverRanks(ctx, pg, []float64{loss, lossSum / float64(n)})
			if err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			secs := time.Since(logStart).Seconds()
			if rank == 0 {
				fmt.Fprintf(out, "step %d: train loss %.4f, mean of steps %d–%d %.4f, %.0f tokens/s\n",
					step, mean[0], step-n+1, step, mean[1], float64(n*tokens)/secs)
			}
			lossSum, logStart = 0, time.Now()
		}
		if c.evalEvery > 0 && step%c.evalEvery == 0 && step < c.steps {
			t := time.Now()
			v, err := tr.valLoss(ctx, corpus)
			if err != nil {
				return fmt.Errorf("step %d: validation: %w", step, err)
			}
			record("val", step, v)
			if rank == 0 {
				fmt.Fprintf(out, "step %d: val loss %.4f\n", step, v)
			}
			evalTime += time.Since(t)
			logStart = time.Now() // validation is not training throughput
		}
		if c.ckptDir != "" && (step%c.ckptEvery == 0 || step == c.steps) {
			t := time.Now()
			if err := saveCheckpoint(ctx, c, pg, tr, model, step, stream.Steps()); err != nil {
				return fmt.Errorf("step %d: checkpoint: %w", step, err)
			}
			evalTime += time.Since(t)
			logStart = time.Now()
		}
		if halt, err := c.stop.ShouldStop(ctx, pg); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		} else if halt {
			saved := "no checkpoint without -checkpoint-dir"
			if c.ckptDir != "" {
				if step%c.ckptEvery != 0 && step != c.steps { // else saved above
					if err := saveCheckpoint(ctx, c, pg, tr, model, step, stream.Steps()); err != nil {
						return fmt.Errorf("step %d: checkpoint: %w", step, err)
					}
				}
				saved = "checkpoint saved in " + c.ckptDir
			}
			return fmt.Errorf("%w after step %d; %s", c.stop.Err(), step, saved)
		}
		if step == c.stopAfter {
			return errStopped
		}
	}
	elapsed := time.Since(start) - evalTime
	v, err := tr.valLoss(ctx, corpus)
	if err != nil {
		return fmt.Errorf("final validation: %w", err)
	}
	record("val", c.steps, v)
	if c.save != "" {
		if err := saveWeights(ctx, c, pg, tr, model); err != nil {
			return fmt.Errorf("-save: %w", err)
		}
	}
	// No rank leaves (closing its links) before every rank is done.
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return fmt.Errorf("final barrier: %w", err)
	}
	if err := closeWatch(); err != nil { // before the result
		return err
	}
	if rank == 0 {
		if c.save != "" {
			fmt.Fprintf(out, "weights saved to %s\n", c.save)
		}
		if done := c.steps - first + 1; done > 0 {
			fmt.Fprintf(out, "%d steps in %.1f s of training (%.0f tokens/s)\n", done, elapsed.Seconds(),
				float64(done*tokens)/elapsed.Seconds())
		}
		fmt.Fprintf(out, "val loss: %.4f\n", v)
	}
	return nil
}

// meanOverRanks averages v element-wise over the ranks.
func meanOverRanks(ctx context.Context, pg distributed.ProcessGroup, v []float64) ([]float64, error) {
	if pg.Size() == 1 {
		return v, nil
	}
	if err := pg.AllReduce(ctx, distributed.F64(v), distributed.Avg).Wait(); err != nil {
		return nil, fmt.Errorf("averaging the loss over the ranks: %w", err)
	}
	return v, nil
}

func numParams(m *models.GPT) int {
	n := 0
	for _, p := range m.NamedParameters() {
		n += p.Param.Value.Len()
	}
	return n
}

// autocast trains model's products in -dtype (recipe.Autocast); rank 0
// says once on stderr when bf16 runs on the widening fallback.
func autocast(dtype string, model nn.Module, rank int) error {
	dt, err := recipe.ParseDType(dtype)
	if err != nil {
		return fmt.Errorf("-dtype: %w", err)
	}
	_, note, err := recipe.Autocast(model, dt)
	if err != nil {
		return err
	}
	if note != "" && rank == 0 {
		fmt.Fprintln(os.Stderr, note)
	}
	return nil
}
