package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/recipe"
	"github.com/cohortml/cohort/tensor"
)

// The GPT-mini anchor workload (gpt_mini.py, gpt_bench.py): the bytes of
// Opticks split 90/10, each step world·32 random 64-byte windows drawn
// from one MT19937 seeded with 0 (rank r takes its 32), model seed 0,
// package recipe's AdamW and clipping.
const (
	gptBatch     = recipe.GPTBatch
	gptDataSeed  = 0
	gptModelSeed = 0
)

// gptTrainRun is trainRun for GPT-mini: pg's rank (a world of one when pg
// is nil) runs s.warmup untimed and s.steps timed steps of zero-grad,
// forward, mean cross-entropy, backward, gradient average over the ranks,
// clipping and AdamW.
//
// The gradients are averaged by one all-reduce after backward, by hand.
// Under ddp.WrapModule instead (bucketed all-reduces overlapping backward,
// as PyTorch's DDP) a world-2 run over shared memory measured no faster:
// 1.33× PyTorch's tokens/s against 1.44× this way in 3 rounds beside it,
// and medians of 14,711 against 14,434 tokens/s in 6 alternating rounds,
// within the noise; the overlapped all-reduces were busy 28–44 ms a step
// with 12–20 ms exposed, their op goroutines waiting in the transport
// while backward computes. Revisit when that wait no longer costs compute.
func gptTrainRun(ctx context.Context, s trainSpec, pg distributed.ProcessGroup, cpuprofile string) (trainResult, error) {
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
	if err := s.autocast(model, rank); err != nil {
		return res, err
	}
	// Every gradient is a view into grads, which one all-reduce averages.
	grads := make([]float32, res.Params)
	off := 0
	for _, p := range params {
		n := p.Value.Len()
		p.Grad = tensor.FromSlice(grads[off:off+n:off+n], p.Value.Shape()...)
		off += n
	}
	opt, err := recipe.NewAdamW(params)
	if err != nil {
		return res, err
	}

	var x, y []int64
	step := func() error {
		t := time.Now()
		x, y = stream.Next(x, y)
		res.Data += time.Since(t)
		opt.ZeroGrad()
		loss := model.Loss(model.Forward(x, gptBatch, cfg.Ctx), y)
		autograd.Backward(loss)
		if pg != nil && world > 1 {
			t := time.Now()
			if err := pg.AllReduce(ctx, distributed.F32(grads), distributed.Avg).Wait(); err != nil {
				return fmt.Errorf("gradient all-reduce: %w", err)
			}
			res.AllReduce += time.Since(t)
		}
		if err := recipe.Update(params, opt); err != nil {
			return err
		}
		res.LastLoss = loss.Value.Item()
		return nil
	}
	reset := func() { res.Data, res.AllReduce = 0, 0 }
	res.Wall, err = timeSteps(ctx, s, pg, cpuprofile, benchProgress(pg, s.steps, gptBatch*cfg.Ctx, "tokens"), step, reset, &res)
	return res, err
}

// gptTokensPerSec is the anchor's figure: world·32·64·steps / wall.
func gptTokensPerSec(s trainSpec, r trainResult) float64 {
	return float64(s.world*gptBatch*models.GPTMini().Ctx*s.steps) / r.Wall.Seconds()
}

// printTrainGPT reports a gpt run; its last line is `train: gpt world N
// dtype D tokens/s X firstN Y`.
func printTrainGPT(w io.Writer, s trainSpec, r trainResult) {
	mode := "one process"
	if s.world > 1 {
		mode = fmt.Sprintf("data parallel (transport %s)", s.transport)
	}
	fmt.Fprintf(w, "train: model gpt (GPT-mini), world %d, %s, batch %d×%d tokens per rank, %d warm-up + %d timed steps, GOMAXPROCS %d, gemm %s\n",
		s.world, mode, gptBatch, models.GPTMini().Ctx, s.warmup, s.steps, r.GOMAXPROCS, r.Gemm)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", d.Seconds()*1e3/float64(s.steps)) }
	fmt.Fprintf(w, "train: %d params, step %s, data %.1f%%, gradient all-reduce %s, last loss %.4f, wall %.2f s\n",
		r.Params, ms(r.Wall), 100*r.Data.Seconds()/r.Wall.Seconds(), ms(r.AllReduce), r.LastLoss, r.Wall.Seconds())
	printHeap(w, s, r)
	fmt.Fprintf(w, "train: gpt world %d dtype %s tokens/s %.0f first%d %.0f\n", s.world, s.dtypeName(), gptTokensPerSec(s, r),
		r.FirstSteps, r.firstRate(s.world*gptBatch*models.GPTMini().Ctx))
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
		"params": r.Params, "steps": s.steps, "warmup": s.warmup, "batch_per_rank": gptBatch, "ctx": models.GPTMini().Ctx, "dtype": s.dtypeName(),
		"wall_s": r.Wall.Seconds(), "step_ms": r.Wall.Seconds() * 1e3 / float64(s.steps),
		"tokens_per_s": tok, "samples_per_s": tok / float64(models.GPTMini().Ctx),
		"first_steps": r.FirstSteps, "first_tokens_per_s": r.firstRate(s.world * gptBatch * models.GPTMini().Ctx), "heap": r.Heap,
		"data_frac": r.Data.Seconds() / r.Wall.Seconds(), "comm_ms": r.AllReduce.Seconds() * 1e3 / float64(s.steps),
		"last_loss": r.LastLoss, "gemm": r.Gemm,
	}
	return writeRecord(w, rec)
}
