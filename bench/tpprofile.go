package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/internal/cli"
	"github.com/cohortml/cohort/internal/warmheap"
	"github.com/cohortml/cohort/launch"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/plan"
	"github.com/cohortml/cohort/recipe"
)

// smallCollectiveBytes separates the loss's small all-reduces (a few
// floats a token) from the activation all-reduces (a token's width).
const smallCollectiveBytes = 64 << 10

// tpProfileResult is what rank 0 of a tensor-parallel profile run reports.
type tpProfileResult struct {
	Compute    float64 `json:"compute_s"`      // mean per step: forward and backward outside the collectives
	Collective float64 `json:"collective_s"`   // mean activation all-reduce, as its caller waits
	Small      float64 `json:"small_s"`        // mean small all-reduce
	Bytes      int64   `json:"bytes"`          // the activation all-reduces' size
	SmallBytes int64   `json:"small_bytes"`    // the small ones' mean size
	PerStep    int     `json:"per_step"`       // activation all-reduces per step
	SmallStep  int     `json:"small_per_step"` // small ones per step
}

// profileTP runs a tensor-parallel GPT-mini of tp ranks (microbatch of
// batch sequences, every rank a worker process started as `exe plan
// tp-worker` through the launcher, as cohort run starts examples/gpt) and
// returns what rank 0 measured.
func profileTP(ctx context.Context, exe string, tpRanks, batch, steps int) (plan.TPRun, tpProfileResult, error) {
	var r tpProfileResult
	cfg := launch.Config{NProcPerNode: tpRanks, Program: exe, Args: []string{"plan", "tp-worker"}, Env: os.Environ(), Stdout: os.Stderr, Stderr: os.Stderr}
	err := spawn(ctx, cfg, func(file string) []string {
		return []string{"--tp", strconv.Itoa(tpRanks), "--batch", strconv.Itoa(batch), "--steps", strconv.Itoa(steps), "--result", file}
	}, &r)
	if err != nil {
		return plan.TPRun{}, r, fmt.Errorf("tensor-parallel profile, tp %d: %w", tpRanks, err)
	}
	return plan.TPRun{ComputeSeconds: r.Compute, CollectiveSeconds: r.Collective, SmallSeconds: r.Small,
		CollectiveBytes: r.Bytes, SmallBytes: r.SmallBytes}, r, nil
}

// TPWorker is one rank of profileTP (`cohort plan tp-worker`, started by
// the launcher): it trains a tensor-parallel GPT-mini on random tokens
// (AdamW, clipping, as examples/gpt does) and times each step's forward
// and backward and, through its process group, every collective from its
// start to the end of its wait.
func TPWorker(args []string) int {
	fs := cli.NewFlagSet("cohort plan tp-worker", "usage: cohort plan tp-worker --tp N --batch B --steps S --result FILE (started by cohort plan validate)\n\nflags:\n", os.Stderr)
	var tpRanks, batch, steps int
	var result string
	fs.IntVar(&tpRanks, "tp", 2, "tensor-parallel ranks (the world)")
	fs.IntVar(&batch, "batch", 32, "sequences of 64 tokens per step")
	fs.IntVar(&steps, "steps", 10, "timed steps (after 3 untimed)")
	fs.StringVar(&result, "result", "", "where rank 0 writes its JSON result")
	if status, ok := cli.Parse(fs, args); !ok {
		return status
	}
	if err := tpWorker(context.Background(), tpRanks, batch, steps, result); err != nil {
		fmt.Fprintln(os.Stderr, "cohort plan tp-worker:", err)
		return 1
	}
	return 0
}

func tpWorker(ctx context.Context, tpRanks, batch, steps int, result string) error {
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	if info.WorldSize != tpRanks {
		return fmt.Errorf("the environment says world %d, --tp %d", info.WorldSize, tpRanks)
	}
	pg, err := distributed.InitFromInfo(ctx, info, distributed.Options{})
	if err != nil {
		return err
	}
	defer pg.Close()
	r, err := measureTP(ctx, pg, batch, steps)
	if err != nil || pg.Rank() != 0 || result == "" {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.WriteFile(result, b, 0o644)
}

// measureTP trains GPT-mini over pg's ranks as examples/gpt does with
// -tp: package layout's trainer of dp 1 × pp 1 × tp ranks (its mesh, its
// tensor-parallel stages, the pipeline executor of one stage), AdamW and
// clipping; 3 untimed and steps timed steps of batch sequences of
// random tokens. It returns this rank's timings: each step's Step, the
// collectives of every group of two or more ranks within it, timed from
// their call to the end of their wait.
func measureTP(ctx context.Context, pg distributed.ProcessGroup, batch, steps int) (tpProfileResult, error) {
	var r tpProfileResult
	rec := &collRecorder{}
	full, err := models.NewGPT(rand.New(rand.NewPCG(0, 0)), models.GPTMini())
	if err != nil {
		return r, err
	}
	cfg := layout.Config{DP: 1, PP: 1, TP: pg.Size(), Microbatches: 1, Schedule: "1f1b", Batch: batch, SeqLen: full.Config.Ctx}
	g, err := layout.Build(ctx, timedGroup{pg, rec}, cfg, full)
	if err != nil {
		return r, err
	}
	opt, err := recipe.NewAdamW(g.Parameters())
	if err != nil {
		return r, err
	}
	T := full.Config.Ctx
	rng := rand.New(rand.NewPCG(1, 2))
	idx, tgt := make([]int64, batch*T), make([]int64, batch*T)
	var compute []float64
	heap := warmheap.NewLoop(warmheap.Options{}) // as examples/gpt's loop does
	for step := range 3 + steps {
		if step == 3 {
			heap.Finish()
		}
		for i := range idx {
			idx[i], tgt[i] = rng.Int64N(int64(full.Config.Vocab)), rng.Int64N(int64(full.Config.Vocab))
		}
		rec.reset()
		t0 := time.Now()
		if _, err := g.Step(ctx, idx, tgt); err != nil {
			return r, err
		}
		wall := time.Since(t0).Seconds()
		calls := rec.take()
		if _, err := g.ClipGradNorm(ctx, recipe.ClipNorm); err != nil {
			return r, err
		}
		opt.Step()
		opt.ZeroGrad()
		if step < 3 {
			heap.Step()
			continue
		}
		in := 0.0
		for _, c := range calls {
			in += c.seconds
		}
		compute = append(compute, wall-in)
		rec.keep(calls)
	}
	// means, not medians: a step's throughput pays for its slow steps
	// and its long waits (a peer descheduled), which a median leaves out
	r.Compute = mean(compute)
	var big, small []float64
	var smallBytes int64
	for _, c := range rec.kept {
		if c.bytes >= smallCollectiveBytes {
			big = append(big, c.seconds)
			r.Bytes = c.bytes
		} else {
			small = append(small, c.seconds)
			smallBytes += c.bytes
		}
	}
	if len(big) == 0 {
		return r, fmt.Errorf("no activation all-reduce of %d bytes or more was timed", smallCollectiveBytes)
	}
	r.Collective, r.PerStep = mean(big), len(big)/steps
	if len(small) > 0 {
		r.Small, r.SmallBytes, r.SmallStep = mean(small), smallBytes/int64(len(small)), len(small)/steps
	}
	return r, nil
}

// collCall is one collective as its caller saw it.
type collCall struct {
	bytes   int64
	seconds float64
}

// collRecorder keeps the collectives of the current step and those of
// the timed steps; the process group's calls and the step's loop share
// it, so it locks.
type collRecorder struct {
	mu   sync.Mutex
	cur  []collCall
	kept []collCall
}

func (r *collRecorder) add(c collCall) { r.mu.Lock(); r.cur = append(r.cur, c); r.mu.Unlock() }
func (r *collRecorder) reset()         { r.mu.Lock(); r.cur = r.cur[:0]; r.mu.Unlock() }
func (r *collRecorder) take() []collCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.cur)
}
func (r *collRecorder) keep(cs []collCall) { r.kept = append(r.kept, cs...) }

// timedGroup is a process group whose all-reduces and all-gathers report
// their time from the call to the end of the wait (tp waits for each at
// once).
type timedGroup struct {
	distributed.ProcessGroup
	rec *collRecorder
}

func (g timedGroup) AllReduce(ctx context.Context, buf distributed.Buffer, op distributed.ReduceOp) distributed.Work {
	start := time.Now()
	return g.record(g.ProcessGroup.AllReduce(ctx, buf, op), start, len(buf.Bytes()))
}

func (g timedGroup) AllGather(ctx context.Context, out, in distributed.Buffer) distributed.Work {
	start := time.Now()
	return g.record(g.ProcessGroup.AllGather(ctx, out, in), start, len(out.Bytes()))
}

// NewGroup times the subgroup's collectives too (package layout's mesh
// makes its groups so).
func (g timedGroup) NewGroup(ctx context.Context, ranks []int) (distributed.ProcessGroup, error) {
	sub, err := distributed.NewGroup(ctx, g.ProcessGroup, ranks)
	if err != nil || sub == nil {
		return sub, err
	}
	return timedGroup{sub, g.rec}, nil
}

// SendsBuffered is the group's (pipeline.Options.SendsBuffered).
func (g timedGroup) SendsBuffered() bool { return distributed.SendsBuffered(g.ProcessGroup) }

func (g timedGroup) record(w distributed.Work, start time.Time, bytes int) distributed.Work {
	if g.Size() < 2 {
		return w
	}
	return &timedWork{Work: w, start: start, bytes: int64(bytes), rec: g.rec}
}

type timedWork struct {
	distributed.Work
	start time.Time
	bytes int64
	rec   *collRecorder
	once  sync.Once
}

func (w *timedWork) Wait() error {
	err := w.Work.Wait()
	w.once.Do(func() { w.rec.add(collCall{bytes: w.bytes, seconds: time.Since(w.start).Seconds()}) })
	return err
}

func mean(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}
