package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"time"

	"cohort/autograd"
	"cohort/datasets"
	"cohort/ddp"
	"cohort/dist"
	"cohort/models"
	"cohort/nn"
	"cohort/optim"
)

// The GPT-mini anchor workload (gpt_mini.py, gpt_bench.py): the bytes of
// Opticks split 90/10, each step world·32 random 64-byte windows drawn
// from one MT19937 seeded with 0 (rank r takes its 32), model seed 0,
// AdamW lr 3e-4 betas (0.9, 0.95) eps 1e-8 weight decay 0.1 on every
// parameter, gradient clipping at norm 1.0.
const (
	gptBatch       = 32
	gptDataSeed    = 0
	gptModelSeed   = 0
	gptLR          = 3e-4
	gptWeightDecay = 0.1
	gptClip        = 1.0
)

// gptTrainRun is trainRun for GPT-mini: pg's rank (a world of one when pg
// is nil) runs s.warmup untimed and s.steps timed steps of zero-grad,
// forward, mean cross-entropy, backward, clipping and AdamW. Above one
// rank the model runs under DDP (ddp.WrapModule, gradients as bucket
// views), whose bucketed all-reduce overlaps backward, as gpt_bench.py's
// DistributedDataParallel does.
func gptTrainRun(ctx context.Context, s trainSpec, pg dist.ProcessGroup, cpuprofile string) (trainResult, error) {
	world, rank := 1, 0
	if pg != nil {
		world, rank = pg.Size(), pg.Rank()
	}
	path, err := datasets.OpticksPath(ctx)
	if err != nil {
		return trainResult{}, err
	}
	cfg := models.GPTMini()
	corpus, err := datasets.LoadByteCorpus(path, cfg.Ctx)
	if err != nil {
		return trainResult{}, err
	}
	stream, err := corpus.NewWindowStream(gptDataSeed, world, rank, gptBatch)
	if err != nil {
		return trainResult{}, err
	}
	model, err := models.NewGPT(rand.New(rand.NewPCG(gptModelSeed, 0)), cfg)
	if err != nil {
		return trainResult{}, err
	}
	params := nn.Parameters(model)
	res := trainResult{Params: nn.NumParameters(model)}
	var m *ddp.Model
	if pg != nil && world > 1 {
		if m, err = ddp.WrapModule(ctx, model, pg, ddp.Options{GradientAsBucketView: true}); err != nil {
			return res, err
		}
		defer m.Close()
	}
	opt, err := optim.NewAdamW([]optim.Group{{Params: params, LR: gptLR, WeightDecay: gptWeightDecay}},
		optim.AdamOptions{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err != nil {
		return res, err
	}
	barrier := func() error {
		if pg == nil {
			return nil
		}
		return pg.Barrier(ctx).Wait()
	}

	var x, y []int64
	step := func() (data time.Duration, err error) {
		t := time.Now()
		x, y = stream.Next(x, y)
		data = time.Since(t)
		opt.ZeroGrad()
		forward := func() *autograd.Var { return model.Forward(x, gptBatch, cfg.Ctx) }
		if m == nil {
			loss := model.Loss(forward(), y)
			autograd.Backward(loss)
			res.LastLoss = loss.Value.Item()
		} else {
			out, err := m.Call(ctx, forward)
			if err != nil {
				return data, err
			}
			loss := model.Loss(out, y)
			if err := m.Backward(ctx, loss); err != nil {
				return data, fmt.Errorf("gradient all-reduce: %w", err)
			}
			res.LastLoss = loss.Value.Item()
		}
		if _, err := optim.ClipGradNorm(params, gptClip, 2); err != nil {
			return data, err
		}
		opt.Step()
		return data, nil
	}
	for range s.warmup {
		if _, err := step(); err != nil {
			return res, err
		}
	}
	if m != nil {
		m.ResetStats()
	}
	if err := barrier(); err != nil {
		return res, fmt.Errorf("barrier after warm-up: %w", err)
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	report := benchProgress(pg, s.steps, gptBatch*models.GPTMini().Ctx)
	for i := range s.steps {
		d, err := step()
		res.Data += d
		if err != nil {
			return res, err
		}
		report(i+1, float64(res.LastLoss))
	}
	if err := barrier(); err != nil {
		return res, fmt.Errorf("barrier after the timed steps: %w", err)
	}
	res.Wall = time.Since(start)
	if m != nil {
		st := m.Stats()
		res.DDP = &st
	}
	return res, nil
}

// gptTokensPerSec is the anchor's figure: world·32·64·steps / wall.
func gptTokensPerSec(s trainSpec, r trainResult) float64 {
	return float64(s.world*gptBatch*models.GPTMini().Ctx*s.steps) / r.Wall.Seconds()
}

// printTrainGPT reports a gpt run; its last line is `train: gpt world N
// tokens/s X`.
func printTrainGPT(w io.Writer, s trainSpec, r trainResult) {
	mode := "one process"
	if s.world > 1 {
		mode = fmt.Sprintf("data parallel (transport %s)", s.transport)
	}
	fmt.Fprintf(w, "train: model gpt (GPT-mini), world %d, %s, batch %d×%d tokens per rank, %d warm-up + %d timed steps, GOMAXPROCS %d, gemm %s\n",
		s.world, mode, gptBatch, models.GPTMini().Ctx, s.warmup, s.steps, r.GOMAXPROCS, r.Gemm)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", d.Seconds()*1e3/float64(s.steps)) }
	fmt.Fprintf(w, "train: %d params, step %s, data %.1f%%, last loss %.4f, wall %.2f s\n",
		r.Params, ms(r.Wall), 100*r.Data.Seconds()/r.Wall.Seconds(), r.LastLoss, r.Wall.Seconds())
	if st := r.DDP; st != nil {
		fmt.Fprintf(w, "train: rank 0 per step: forward %s, backward %s, all-reduce %s (%.0f%% hidden behind backward), exposed %s\n",
			ms(st.Forward), ms(st.Backward), ms(st.Busy), 100*st.HiddenFraction(), ms(st.Exposed))
	}
	fmt.Fprintf(w, "train: gpt world %d tokens/s %.0f\n", s.world, gptTokensPerSec(s, r))
}

// printTrainGPTJSON reports a gpt run as one JSON object on one line, with
// the field names of gpt_bench.py's records where they exist.
func printTrainGPTJSON(w io.Writer, s trainSpec, r trainResult) error {
	mode := "noddp"
	if s.world > 1 {
		mode = "ddp"
	}
	tok := gptTokensPerSec(s, r)
	rec := map[string]any{
		"bench": "gpt_tput", "impl": "cohort", "model": "gpt", "world": s.world, "mode": mode,
		"threads": s.threads, "gomaxprocs": r.GOMAXPROCS, "transport": s.transport,
		"params": r.Params, "steps": s.steps, "warmup": s.warmup, "batch_per_rank": gptBatch, "ctx": models.GPTMini().Ctx,
		"wall_s": r.Wall.Seconds(), "step_ms": r.Wall.Seconds() * 1e3 / float64(s.steps),
		"tokens_per_s": tok, "samples_per_s": tok / float64(models.GPTMini().Ctx),
		"data_frac": r.Data.Seconds() / r.Wall.Seconds(), "last_loss": r.LastLoss, "gemm": r.Gemm,
	}
	if st := r.DDP; st != nil {
		per := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(s.steps) }
		rec["comm_ms"], rec["exposed_ms"], rec["hidden_frac"] = per(st.Busy), per(st.Exposed), st.HiddenFraction()
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
