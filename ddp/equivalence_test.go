package ddp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
)

// The central property: DDP over N ranks with batch b per rank gives the
// parameters of one process training on batch N·b over the same samples,
// up to float32 rounding (the batch mean is summed in a different order).

// trainCfg describes a training run shared by the DDP ranks and the
// single-process reference.
type trainCfg struct {
	net     func(seed uint64) nn.Layer
	data    dataset
	world   int
	batch   int // per rank
	steps   int // optimizer steps (of the longest rank)
	accum   int // micro-batches per step; all but the last under NoSync
	opt     string
	opts    Options
	rankLen func(rank int) int // optimizer steps of each rank (Join); nil: all equal
	hooked  func(rank int) Options
}

func (c trainCfg) stepsOf(rank int) int {
	if c.rankLen == nil {
		return c.steps
	}
	return c.rankLen(rank)
}

// samples returns rank's sample range for step s, micro-batch k.
func (c trainCfg) samples(rank, s, k int) (lo, hi int) {
	base := (s*c.accum + k) * c.world * c.batch
	return base + rank*c.batch, base + (rank+1)*c.batch
}

func (c trainCfg) optimizer(m nn.Module) (optim.Optimizer, error) {
	ps := nn.Parameters(m)
	switch c.opt {
	case "sgd":
		return optim.NewSGD([]optim.Group{{Params: ps, LR: 0.05}}, optim.SGDOptions{Momentum: 0.9})
	case "adamw":
		return optim.NewAdamW([]optim.Group{{Params: ps, LR: 0.01, WeightDecay: 0.01}}, optim.AdamDefaults())
	}
	return nil, fmt.Errorf("unknown optimizer %q", c.opt)
}

func loss(out *autograd.Var, y []int64) *autograd.Var {
	return autograd.CrossEntropy(out, y, autograd.CrossEntropyOptions{})
}

// reference trains one process on the union of the active ranks' samples.
func (c trainCfg) reference(t *testing.T) [][]float32 {
	t.Helper()
	net := c.net(100) // rank 0's initial parameters
	opt, err := c.optimizer(net)
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < c.steps; s++ {
		for k := 0; k < c.accum; k++ {
			// The active ranks' samples, in rank order.
			var xs []float32
			var ys []int64
			n := 0
			for r := 0; r < c.world; r++ {
				if s >= c.stepsOf(r) {
					continue
				}
				lo, hi := c.samples(r, s, k)
				xs = append(xs, c.data.x[lo*c.data.stride:hi*c.data.stride]...)
				ys = append(ys, c.data.y[lo:hi]...)
				n++
			}
			if n == 0 {
				continue
			}
			d := dataset{x: xs, y: ys, shape: c.data.shape, stride: c.data.stride}
			x, y := d.batch(0, len(ys))
			l := loss(net.Forward(x), y)
			if c.opts.JoinDivideByWorldSize { // the sum over n ranks is divided by all of them
				l = autograd.Scale(l, float32(n)/float32(c.world))
			}
			autograd.Backward(l)
		}
		opt.Step()
		opt.ZeroGrad()
	}
	return dptest.Params(net)
}

// rank trains one DDP rank and returns its final parameters.
func (c trainCfg) rank(pg distributed.ProcessGroup) ([][]float32, *Model, error) {
	ctx := context.Background()
	r := pg.Rank()
	net := c.net(uint64(100 + r)) // every rank starts elsewhere: Wrap must fix it
	o := c.opts
	if c.hooked != nil {
		o = c.hooked(r)
	}
	m, err := Wrap(ctx, net, pg, o)
	if err != nil {
		return nil, nil, err
	}
	opt, err := c.optimizer(m)
	if err != nil {
		return nil, nil, err
	}
	step := func(s, k int) error {
		lo, hi := c.samples(r, s, k)
		return c.data.pass(ctx, m, lo, hi)
	}
	train := func() error {
		for s := 0; s < c.stepsOf(r); s++ {
			for k := 0; k < c.accum-1; k++ {
				if err := m.NoSync(func() error { return step(s, k) }); err != nil {
					return err
				}
			}
			if err := step(s, c.accum-1); err != nil {
				return err
			}
			opt.Step()
			opt.ZeroGrad()
		}
		return nil
	}
	if c.rankLen != nil {
		err = m.Join(ctx, train)
	} else {
		err = train()
	}
	return dptest.Params(net), m, err
}

// run trains all ranks and checks them against the reference.
func (c trainCfg) run(t *testing.T) []*Model {
	t.Helper()
	if c.accum == 0 {
		c.accum = 1
	}
	want := c.reference(t)
	got := make([][][]float32, c.world)
	models := make([]*Model, c.world)
	errs := runDist(t, c.world, func(pg distributed.ProcessGroup) error {
		var err error
		got[pg.Rank()], models[pg.Rank()], err = c.rank(pg)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	moved := 0.0
	init := dptest.Params(c.net(100))
	for r := range got {
		for i := range want {
			for j := range want[i] {
				g, w := float64(got[r][i][j]), float64(want[i][j])
				if math.Abs(g-w) > 2e-5+1e-4*math.Abs(w) {
					t.Fatalf("rank %d parameter %d element %d: DDP %g, single process %g", r, i, j, g, w)
				}
				if r > 0 && got[r][i][j] != got[0][i][j] {
					t.Fatalf("rank %d parameter %d element %d: %g differs from rank 0's %g (replicas diverged)", r, i, j, got[r][i][j], got[0][i][j])
				}
				moved = math.Max(moved, math.Abs(w-float64(init[i][j])))
			}
		}
	}
	if moved < 1e-3 {
		t.Fatalf("training moved parameters by at most %g: the comparison proves nothing", moved)
	}
	return models
}

func mlpCfg() trainCfg {
	return trainCfg{
		net:   func(seed uint64) nn.Layer { return newMLP(seed, 12, 16, 16, 5) },
		data:  newDataset(1, 400, 5, 12),
		batch: 3, steps: 4, accum: 1,
	}
}

func cnnCfg() trainCfg {
	return trainCfg{
		net:   func(seed uint64) nn.Layer { return newCNN(seed, 4) },
		data:  newDataset(2, 400, 4, 1, 8, 8),
		batch: 2, steps: 3, accum: 1,
	}
}

// smallBuckets forces several buckets, so reductions overlap backward and
// the rebuild reorders them.
var smallBuckets = Options{FirstBucketCapBytes: 64, BucketCapBytes: 600}

func TestEquivalence(t *testing.T) {
	models := []struct {
		name string
		cfg  func() trainCfg
	}{{"mlp", mlpCfg}, {"cnn", cnnCfg}}
	layouts := []struct {
		name string
		opts Options
	}{
		{"default", Options{}},
		{"small-buckets", smallBuckets},
		{"bucket-view", Options{GradientAsBucketView: true, FirstBucketCapBytes: 64, BucketCapBytes: 600}},
	}
	for _, md := range models {
		for _, opt := range []string{"sgd", "adamw"} {
			for _, lay := range layouts {
				for world := 1; world <= 4; world++ {
					t.Run(fmt.Sprintf("%s/%s/%s/world=%d", md.name, opt, lay.name, world), func(t *testing.T) {
						c := md.cfg()
						c.world, c.opt, c.opts = world, opt, lay.opts
						c.run(t)
					})
				}
			}
		}
	}
}

func TestEquivalenceNoSync(t *testing.T) {
	for _, lay := range []struct {
		name string
		opts Options
	}{{"copy", smallBuckets}, {"bucket-view", Options{GradientAsBucketView: true, FirstBucketCapBytes: 64, BucketCapBytes: 600}}} {
		for _, world := range []int{1, 2, 3, 4} {
			for _, md := range []struct {
				name string
				cfg  func() trainCfg
			}{{"mlp", mlpCfg}, {"cnn", cnnCfg}} {
				t.Run(fmt.Sprintf("%s/%s/world=%d", md.name, lay.name, world), func(t *testing.T) {
					c := md.cfg()
					c.world, c.opt, c.opts, c.accum = world, "sgd", lay.opts, 3
					c.run(t)
				})
			}
		}
	}
}

func TestEquivalenceJoin(t *testing.T) {
	tests := []struct {
		name    string
		world   int
		rankLen []int
	}{
		{"world=2/rank1-short", 2, []int{4, 2}},
		{"world=2/rank0-short", 2, []int{1, 4}},
		{"world=3/one-empty", 3, []int{4, 2, 0}},
		{"world=4/staggered", 4, []int{2, 5, 3, 4}},
		{"world=3/even", 3, []int{3, 3, 3}},
	}
	for _, tt := range tests {
		for _, opt := range []string{"sgd", "adamw"} {
			for _, view := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/view=%v", tt.name, opt, view), func(t *testing.T) {
					c := mlpCfg()
					c.world, c.opt = tt.world, opt
					c.opts = smallBuckets
					c.opts.GradientAsBucketView = view
					c.steps = 0
					for _, n := range tt.rankLen {
						c.steps = max(c.steps, n)
					}
					c.rankLen = func(r int) int { return tt.rankLen[r] }
					c.run(t)
				})
			}
		}
	}
	t.Run("divide-by-world-size", func(t *testing.T) {
		c := mlpCfg()
		c.world, c.opt, c.steps = 3, "sgd", 4
		c.opts = smallBuckets
		c.opts.JoinDivideByWorldSize = true
		c.rankLen = func(r int) int { return []int{4, 1, 3}[r] }
		c.run(t)
	})
}

// TestEquivalenceAnchorModels runs the benchmark models themselves (the
// 1.9M-parameter MLP, in two default buckets, and LeNet) for two steps.
func TestEquivalenceAnchorModels(t *testing.T) {
	tests := []struct {
		name  string
		net   func(seed uint64) nn.Layer
		shape []int
	}{
		{"mlp", func(seed uint64) nn.Layer { return models.MLP(rand.New(rand.NewPCG(seed, 0))) }, []int{784}},
		{"lenet", func(seed uint64) nn.Layer { return models.LeNet(rand.New(rand.NewPCG(seed, 0))) }, []int{1, 28, 28}},
	}
	for _, tt := range tests {
		for _, world := range []int{1, 2, 4} {
			for _, view := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/world=%d/view=%v", tt.name, world, view), func(t *testing.T) {
					c := trainCfg{net: tt.net, data: newDataset(7, 64, 10, tt.shape...), world: world,
						batch: 2, steps: 2, accum: 1, opt: "sgd", opts: Options{GradientAsBucketView: view}}
					c.run(t)
				})
			}
		}
	}
}

// TestJoinBodyError: a rank whose loop fails between steps makes the
// others' Join fail with an error naming it, instead of hanging.
func TestJoinBodyError(t *testing.T) {
	const world = 3
	boom := fmt.Errorf("data loader broke")
	start := time.Now()
	errs := runDistTimeout(t, world, 20*time.Second, func(pg distributed.ProcessGroup) error {
		ctx := context.Background()
		m, err := Wrap(ctx, newMLP(1, 4, 5, 3), pg, Options{})
		if err != nil {
			return err
		}
		data := newDataset(1, 60, 3, 4)
		return m.Join(ctx, func() error {
			for s := 0; s < 5; s++ {
				if pg.Rank() == 1 && s == 2 {
					return boom
				}
				if err := data.pass(ctx, m, s*6+pg.Rank()*2, s*6+pg.Rank()*2+2); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v: a rank waited for a timeout", d)
	}
	for r, err := range errs {
		want := "ranks [1] stopped training with an error"
		if r == 1 {
			want = boom.Error()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("rank %d: err = %v, want one containing %q", r, err, want)
		}
	}
}
