package data

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/cohortml/cohort/tensor"
)

// seqDataset is a test dataset: sample i has shape [2, 3] holding
// i·10 + 0..5 and label i % 7. failAt makes Get fail (or panic) there;
// oddAt returns a sample of another shape there.
type seqDataset struct {
	n       int
	failAt  int
	panicAt int
	oddAt   int
	x       []float32
	labels  []int64
}

func newSeq(n int) *seqDataset {
	d := &seqDataset{n: n, failAt: -1, panicAt: -1, oddAt: -1, x: make([]float32, 6*n), labels: make([]int64, n)}
	for i := range n {
		for j := range 6 {
			d.x[6*i+j] = float32(10*i + j)
		}
		d.labels[i] = int64(i % 7)
	}
	return d
}

var seqShape = []int{2, 3}

func (d *seqDataset) Len() int { return d.n }
func (d *seqDataset) Get(i int) (Sample, error) {
	switch i {
	case d.failAt:
		return Sample{}, errors.New("disk on fire")
	case d.panicAt:
		panic("dataset bug")
	case d.oddAt:
		return Sample{X: d.x[6*i : 6*i+5], Shape: []int{5}, Labels: d.labels[i : i+1]}, nil
	}
	if err := ErrIndex(i, d.n); err != nil {
		return Sample{}, err
	}
	return Sample{X: d.x[6*i : 6*i+6], Shape: seqShape, Labels: d.labels[i : i+1]}, nil
}

// batcher is a Loader or a StreamLoader.
type batcher interface {
	Batches(ctx context.Context) iter.Seq2[*Batch, error]
}

// collect ranges over one epoch of l, cloning every batch; it stops after
// limit batches when limit ≥ 0.
func collect(t *testing.T, ctx context.Context, l batcher, limit int) ([]*Batch, error) {
	t.Helper()
	var out []*Batch
	for b, err := range l.Batches(ctx) {
		if err != nil {
			return out, err
		}
		out = append(out, b.Clone())
		if limit >= 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

func sameBatches(t *testing.T, got, want []*Batch) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d batches, want %d", len(got), len(want))
	}
	for k := range got {
		g, w := got[k], want[k]
		if g.Epoch != w.Epoch || g.Step != w.Step || !slices.Equal(g.Indices, w.Indices) ||
			!slices.Equal(g.X.Data(), w.X.Data()) || !slices.Equal(g.X.Shape(), w.X.Shape()) || !slices.Equal(g.Labels, w.Labels) {
			t.Fatalf("batch %d: got epoch %d step %d indices %v, want epoch %d step %d indices %v (or data differs)",
				k, g.Epoch, g.Step, g.Indices, w.Epoch, w.Step, w.Indices)
		}
	}
}

func mustLoader(t *testing.T, ds Dataset, bs BatchSampler, o Options) *Loader {
	t.Helper()
	l, err := NewLoader(ds, bs, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func distBatches(t *testing.T, n, world, rank, batch int, seed uint64, drop bool) BatchSampler {
	t.Helper()
	s, err := NewDistributedSampler(n, world, rank, true, seed, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBatchSampler(s, batch, drop)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// noise is a Transform that adds rng noise, to check the random stream
// is a function of (seed, epoch, step) only.
func noise(b *Batch, rng *rand.Rand) error {
	x := b.X.Data()
	for i := range x {
		x[i] += rng.Float32()
	}
	return nil
}

func TestLoaderContent(t *testing.T) {
	ds := newSeq(10)
	bs, _ := NewBatchSampler(SequentialSampler{N: 10}, 4, false)
	l := mustLoader(t, ds, bs, Options{})
	got, err := collect(t, t.Context(), l, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d batches, want 3", len(got))
	}
	b := got[2]
	if !slices.Equal(b.X.Shape(), []int{2, 2, 3}) || !slices.Equal(b.Indices, []int{8, 9}) {
		t.Fatalf("last batch shape %v indices %v, want [2 2 3] [8 9]", b.X.Shape(), b.Indices)
	}
	if want := []float32{80, 81, 82, 83, 84, 85, 90, 91, 92, 93, 94, 95}; !slices.Equal(b.X.Data(), want) {
		t.Fatalf("X %v, want %v", b.X.Data(), want)
	}
	if !slices.Equal(b.Labels, []int64{1, 2}) || !slices.Equal(b.Y.Data(), []float32{1, 2}) || !slices.Equal(b.Y.Shape(), []int{2}) {
		t.Fatalf("labels %v Y %v", b.Labels, b.Y)
	}
	if l.Epoch() != 1 || l.State().Position != 0 {
		t.Fatalf("after a full epoch: epoch %d position %d, want 1 0", l.Epoch(), l.State().Position)
	}
}

// TestLoaderWorkersIdentical: the batches (with a random transform) are
// the same for any number of workers and prefetch depth.
func TestLoaderWorkersIdentical(t *testing.T) {
	ds := newSeq(203)
	var ref []*Batch
	for _, c := range []struct{ workers, prefetch int }{{0, 0}, {1, 0}, {1, 1}, {2, 0}, {3, 3}, {4, 16}, {8, 0}, {16, 2}} {
		t.Run(fmt.Sprintf("workers=%d/prefetch=%d", c.workers, c.prefetch), func(t *testing.T) {
			l := mustLoader(t, ds, distBatches(t, 203, 3, 1, 8, 42, false), Options{Workers: c.workers, Prefetch: c.prefetch, Seed: 9, Transform: noise})
			var all []*Batch
			for epoch := range 3 {
				l.SetEpoch(epoch)
				got, err := collect(t, t.Context(), l, -1)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, got...)
			}
			if ref == nil {
				ref = all
				if slices.Equal(all[0].Indices, all[len(all)/3].Indices) {
					t.Fatal("epochs 0 and 1 start alike: epoch not reaching the sampler")
				}
				return
			}
			sameBatches(t, all, ref)
		})
	}
}

// TestLoaderResume is the resume property: for many configurations,
// stopping after k batches, saving the State (through JSON) and restoring
// it into a fresh loader yields exactly the rest of the uninterrupted run.
func TestLoaderResume(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 40 {
		n := 1 + rng.IntN(120)
		batch := 1 + rng.IntN(9)
		workers := rng.IntN(4)
		world := 1 + rng.IntN(3)
		rank := rng.IntN(world)
		drop := rng.IntN(2) == 0
		epochs := 2
		name := fmt.Sprintf("trial=%d/n=%d/batch=%d/workers=%d/world=%d/drop_last=%v", trial, n, batch, workers, world, drop)
		t.Run(name, func(t *testing.T) {
			ds := newSeq(n)
			opts := Options{Workers: workers, Seed: 77, Transform: noise}
			l := mustLoader(t, ds, distBatches(t, n, world, rank, batch, 5, drop), opts)
			var full []*Batch
			for range epochs {
				got, err := collect(t, t.Context(), l, -1)
				if err != nil {
					t.Fatal(err)
				}
				full = append(full, got...)
			}
			k := rng.IntN(len(full) + 1)
			// Interrupted run: epochs in turn, stopping after k batches overall.
			l1 := mustLoader(t, ds, distBatches(t, n, world, rank, batch, 5, drop), opts)
			var head []*Batch
			for len(head) < k {
				got, err := collect(t, t.Context(), l1, k-len(head))
				if err != nil {
					t.Fatal(err)
				}
				head = append(head, got...)
			}
			saved, err := json.Marshal(l1.State())
			if err != nil {
				t.Fatal(err)
			}
			var st State
			if err := json.Unmarshal(saved, &st); err != nil {
				t.Fatal(err)
			}
			l2 := mustLoader(t, ds, distBatches(t, n, world, rank, batch, 5, drop), opts)
			if err := l2.Restore(st); err != nil {
				t.Fatal(err)
			}
			tail := []*Batch{}
			for l2.Epoch() < epochs {
				got, err := collect(t, t.Context(), l2, -1)
				if err != nil {
					t.Fatal(err)
				}
				tail = append(tail, got...)
			}
			sameBatches(t, append(head, tail...), full)
		})
	}
}

func TestLoaderRestoreErrors(t *testing.T) {
	ds := newSeq(50)
	l := mustLoader(t, ds, distBatches(t, 50, 2, 0, 4, 5, false), Options{Seed: 3})
	good := l.State()
	other := mustLoader(t, ds, distBatches(t, 50, 2, 0, 4, 6, false), Options{Seed: 3}).State()
	world3 := mustLoader(t, ds, distBatches(t, 50, 3, 0, 4, 5, false), Options{Seed: 3}).State()
	cases := []struct {
		name string
		st   State
		want string
	}{
		{"seed", State{Seed: 4, Plan: good.Plan}, "state seed 4, loader seed 3"},
		{"sampler seed", other, "batch plan"},
		{"world size", world3, "batch plan"},
		{"position", State{Seed: 3, Position: 8, Plan: good.Plan}, "position 8 outside the 7 batches"},
		{"negative epoch", State{Seed: 3, Epoch: -1, Plan: good.Plan}, "epoch -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := l.Restore(c.st); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
		})
	}
	t.Run("end of epoch", func(t *testing.T) {
		st := good
		st.Position = 7
		if err := l.Restore(st); err != nil {
			t.Fatal(err)
		}
		if l.Epoch() != 1 || l.State().Position != 0 {
			t.Fatalf("epoch %d position %d, want 1 0", l.Epoch(), l.State().Position)
		}
	})
}

func TestLoaderErrors(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(d *seqDataset)
		sampler BatchSampler
		want    []string
	}{
		{"sample error", func(d *seqDataset) { d.failAt = 37 }, nil, []string{"sample 37", "disk on fire", "epoch 0 step"}},
		{"sample panic", func(d *seqDataset) { d.panicAt = 12 }, nil, []string{"panic: dataset bug", "epoch 0 step"}},
		{"odd shape", func(d *seqDataset) { d.oddAt = 21 }, nil, []string{"sample 21", "shape [5] differs from its batch-mates' [2 3]"}},
		{"index out of range", nil, fixedPlan{{1, 2}, {3, 64}}, []string{"sample index 64 out of range [0, 64)", "epoch 0 step 1"}},
	}
	for _, c := range cases {
		for _, workers := range []int{0, 3} {
			t.Run(fmt.Sprintf("%s/workers=%d", c.name, workers), func(t *testing.T) {
				ds := newSeq(64)
				if c.setup != nil {
					c.setup(ds)
				}
				bs := c.sampler
				if bs == nil {
					bs, _ = NewBatchSampler(SequentialSampler{N: 64}, 8, false)
				}
				l := mustLoader(t, ds, bs, Options{Workers: workers})
				n := 0
				var err error
				synctest.Test(t, func(t *testing.T) {
					for _, e := range l.Batches(context.Background()) {
						if e != nil {
							err = e
							continue
						}
						n++
					}
				})
				if err == nil {
					t.Fatalf("no error after %d batches", n)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
			})
		}
	}
}

// fixedPlan is a BatchSampler with a fixed plan.
type fixedPlan [][]int

func (p fixedPlan) NumBatches() int     { return len(p) }
func (p fixedPlan) Batches(int) [][]int { return slices.Clone([][]int(p)) }

// TestLoaderShutdown: breaking out early or cancelling the context stops
// every goroutine the loader started (synctest.Test fails if any goroutine
// of the bubble is left blocked), and the loader stays usable.
func TestLoaderShutdown(t *testing.T) {
	for _, workers := range []int{0, 1, 4} {
		t.Run(fmt.Sprintf("break/workers=%d", workers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := mustLoader(t, newSeq(100), distBatches(t, 100, 1, 0, 3, 1, false), Options{Workers: workers, Prefetch: 4})
				n := 0
				for _, err := range l.Batches(context.Background()) {
					if err != nil {
						t.Fatal(err)
					}
					if n++; n == 5 {
						break
					}
				}
				if st := l.State(); st.Position != 5 {
					t.Fatalf("position %d after 5 batches", st.Position)
				}
				rest, err := collect(t, context.Background(), l, -1)
				if err != nil || len(rest) != l.NumBatches()-5 {
					t.Fatalf("after a break: %d batches (err %v), want %d", len(rest), err, l.NumBatches()-5)
				}
			})
		})
		t.Run(fmt.Sprintf("cancel/workers=%d", workers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := mustLoader(t, newSeq(100), distBatches(t, 100, 1, 0, 3, 1, false), Options{Workers: workers, Prefetch: 4})
				cancelAfter(t, l, 3)
			})
		})
	}
	t.Run("busy", func(t *testing.T) {
		l := mustLoader(t, newSeq(10), distBatches(t, 10, 1, 0, 3, 1, false), Options{})
		for range l.Batches(t.Context()) {
			_, err := collect(t, t.Context(), l, -1)
			if err == nil || !strings.Contains(err.Error(), "already running") {
				t.Fatalf("nested Batches: err %v", err)
			}
			break
		}
	})
}

func TestPadCollate(t *testing.T) {
	mk := func(n int, label int64) Sample {
		x := make([]float32, 2*n)
		lab := make([]int64, n)
		for i := range x {
			x[i] = float32(n)
		}
		for i := range lab {
			lab[i] = label
		}
		return Sample{X: x, Shape: []int{n, 2}, Labels: lab}
	}
	var b Batch
	samples := []Sample{mk(2, 7), mk(3, 8), mk(1, 9)}
	if err := (Pad{Value: -1, LabelValue: -100, SequenceLabels: true}).Collate(&b, samples, []int{10, 11, 12}); err != nil {
		t.Fatal(err)
	}
	wantX := []float32{2, 2, 2, 2, -1, -1, 3, 3, 3, 3, 3, 3, 1, 1, -1, -1, -1, -1}
	if !slices.Equal(b.X.Shape(), []int{3, 3, 2}) || !slices.Equal(b.X.Data(), wantX) {
		t.Fatalf("X %v %v, want [3 3 2] %v", b.X.Shape(), b.X.Data(), wantX)
	}
	if want := []int64{7, 7, -100, 8, 8, 8, 9, -100, -100}; !slices.Equal(b.Labels, want) || !slices.Equal(b.Y.Shape(), []int{3, 3}) {
		t.Fatalf("labels %v (Y %v), want %v", b.Labels, b.Y.Shape(), want)
	}
	if !slices.Equal(b.Lengths, []int{2, 3, 1}) || !slices.Equal(b.Mask.Data(), []float32{1, 1, 0, 1, 1, 1, 1, 0, 0}) {
		t.Fatalf("lengths %v mask %v", b.Lengths, b.Mask)
	}
	bad := []Sample{mk(2, 1), {X: make([]float32, 6), Shape: []int{2, 3}, Labels: []int64{1, 2}}}
	err := (Pad{SequenceLabels: true}).Collate(&b, bad, []int{4, 5})
	if err == nil || !strings.Contains(err.Error(), "sample 5") || !strings.Contains(err.Error(), "[2 3]") {
		t.Fatalf("mismatched trailing dims: err %v", err)
	}
	err = (Pad{SequenceLabels: true}).Collate(&b, []Sample{mk(2, 1), {X: make([]float32, 4), Shape: []int{2, 2}, Labels: []int64{1}}}, []int{4, 5})
	if err == nil || !strings.Contains(err.Error(), "sample 5") || !strings.Contains(err.Error(), "1 labels for length 2") {
		t.Fatalf("label count: err %v", err)
	}
}

func TestStackCollateErrors(t *testing.T) {
	x := make([]float32, 8)
	cases := []struct {
		name    string
		samples []Sample
		want    string
	}{
		{"shape", []Sample{{X: x[:4], Shape: []int{2, 2}}, {X: x[:4], Shape: []int{4}}}, "sample 101 (row 1 of the batch): shape [4] differs"},
		{"len vs shape", []Sample{{X: x[:4], Shape: []int{2, 2}}, {X: x[:3], Shape: []int{2, 2}}}, "sample 101 (row 1 of the batch): shape [2 2] needs 4 values, X has 3"},
		{"labels", []Sample{{X: x[:4], Labels: []int64{1}}, {X: x[:4]}}, "sample 101 (row 1 of the batch): 0 labels"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b Batch
			err := Stack{}.Collate(&b, c.samples, []int{100, 101})
			var ce *CollateError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want a *CollateError containing %q", err, c.want)
			}
		})
	}
}

// TestCollateNoAlloc: steady-state collation reuses the batch's memory.
func TestCollateNoAlloc(t *testing.T) {
	ds := newSeq(64)
	samples := make([]Sample, 64)
	idx := identity(64)
	for i := range samples {
		samples[i], _ = ds.Get(i)
	}
	var b Batch
	for _, c := range []struct {
		name string
		c    Collate
	}{{"stack", Stack{}}, {"pad", Pad{}}} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.c.Collate(&b, samples, idx); err != nil {
				t.Fatal(err)
			}
			x := b.X
			allocs := testing.AllocsPerRun(100, func() {
				if err := c.c.Collate(&b, samples, idx); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 || b.X != x {
				t.Fatalf("%v allocations per collate (tensor reused: %v), want 0", allocs, b.X == x)
			}
		})
	}
}

func TestTensorDataset(t *testing.T) {
	x := tensor.FromSlice([]float32{0, 1, 2, 3, 4, 5}, 3, 2)
	d, err := NewTensorDataset(x, []int64{7, 8, 9}, tensor.FromSlice([]float32{.5, .25, .125}, 3, 1))
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.Get(2)
	if err != nil || !slices.Equal(s.X, []float32{4, 5}) || !slices.Equal(s.Labels, []int64{9}) || !slices.Equal(s.Target, []float32{.125}) {
		t.Fatalf("Get(2) = %+v, %v", s, err)
	}
	if _, err := d.Get(3); err == nil || !strings.Contains(err.Error(), "index 3 out of range [0, 3)") {
		t.Fatalf("Get(3): err %v", err)
	}
	if _, err := NewTensorDataset(x, []int64{1, 2}, nil); err == nil || !strings.Contains(err.Error(), "2 labels for 3 samples") {
		t.Fatalf("bad labels: err %v", err)
	}
	if _, err := NewTensorDataset(x, nil, tensor.New(2, 1)); err == nil || !strings.Contains(err.Error(), "target shape [2 1]") {
		t.Fatalf("bad target: err %v", err)
	}
	l := mustLoader(t, d, distBatches(t, 3, 1, 0, 3, 0, false), Options{})
	got, err := collect(t, t.Context(), l, -1)
	if err != nil || len(got) != 1 || !slices.Equal(got[0].Target.Shape(), []int{3, 1}) {
		t.Fatalf("loader over a TensorDataset: %v batches, err %v", len(got), err)
	}
}

// varDataset holds sequences of the given lengths: sample i is [len, 1]
// filled with i, with one label per position.
type varDataset struct{ lengths []int }

func (d varDataset) Len() int { return len(d.lengths) }
func (d varDataset) Get(i int) (Sample, error) {
	if err := ErrIndex(i, len(d.lengths)); err != nil {
		return Sample{}, err
	}
	n := d.lengths[i]
	x, y := make([]float32, n), make([]int64, n)
	for j := range x {
		x[j], y[j] = float32(i), int64(i)
	}
	return Sample{X: x, Shape: []int{n, 1}, Labels: y}, nil
}

// TestLoaderBucketPad runs the bucketing strategy end to end: a loader
// over variable-length sequences with the Pad collate; the padding it
// produces equals what Padding predicts for the plan.
func TestLoaderBucketPad(t *testing.T) {
	lengths := logNormalLengths(500, 8)
	ds := varDataset{lengths}
	for rank := range 2 {
		bs, err := NewBucketSampler(lengths, 16, 2, rank, 1, BucketOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l := mustLoader(t, ds, bs, Options{Workers: 2, Collate: Pad{LabelValue: -100, SequenceLabels: true}})
		var real, pad int
		for b, err := range l.Batches(t.Context()) {
			if err != nil {
				t.Fatal(err)
			}
			longest := b.X.Dim(1)
			for j, i := range b.Indices {
				if b.Lengths[j] != lengths[i] {
					t.Fatalf("row %d: length %d, sample %d has %d", j, b.Lengths[j], i, lengths[i])
				}
				real += lengths[i]
				pad += longest - lengths[i]
				if lengths[i] < longest && b.Labels[j*longest+lengths[i]] != -100 {
					t.Fatalf("row %d: padding label %d", j, b.Labels[j*longest+lengths[i]])
				}
			}
		}
		wr, wp := Padding(lengths, bs.Batches(0))
		if real != wr || pad != wp {
			t.Fatalf("rank %d: %d real + %d pad positions, Padding says %d + %d", rank, real, pad, wr, wp)
		}
	}
}

// cancelAfter ranges over l, cancels the context after the n-th batch and
// checks that the loop ends there with context.Canceled.
func cancelAfter(t *testing.T, l batcher, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := 0
	var last error
	for _, err := range l.Batches(ctx) {
		if err != nil {
			last = err
			continue
		}
		if got++; got == n {
			cancel()
		}
	}
	if !errors.Is(last, context.Canceled) || got != n {
		t.Fatalf("after cancel: %d batches, err %v; want %d and context.Canceled", got, last, n)
	}
}
