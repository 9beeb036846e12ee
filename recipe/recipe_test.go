package recipe

import (
	"context"
	"flag"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

func TestNewClassifier(t *testing.T) {
	for name, want := range map[string]struct {
		params int
		shape  []int
	}{"mlp": {1863690, []int{784}}, "cnn": {61706, []int{1, 28, 28}}} {
		c, err := NewClassifier(name, rand.New(rand.NewPCG(0, 0)))
		if err != nil {
			t.Fatal(err)
		}
		if got := nn.NumParameters(c.Model); got != want.params || !slices.Equal(c.Shape, want.shape) {
			t.Errorf("%s: %d parameters, shape %v; want %d, %v", name, got, c.Shape, want.params, want.shape)
		}
	}
	if _, err := NewClassifier("resnet", rand.New(rand.NewPCG(0, 0))); err == nil {
		t.Error("NewClassifier(resnet): no error")
	}
}

// tinyMNIST is n 28×28 images with pixel values from seed and labels i%10,
// built as a literal (as tests and subsets do).
func tinyMNIST(n int, seed uint64) *datasets.MNIST {
	r := rand.New(rand.NewPCG(seed, 0))
	ds := &datasets.MNIST{Images: make([]float32, n*784), Labels: make([]int64, n), Rows: 28, Cols: 28}
	for i := range ds.Images {
		ds.Images[i] = r.Float32()
	}
	for i := range ds.Labels {
		ds.Labels[i] = int64(i % 10)
	}
	return ds
}

// The loader yields order's samples in order, standardised, in batches of
// batch with a short last one.
func TestMNISTLoader(t *testing.T) {
	ds := tinyMNIST(7, 1)
	order := []int{5, 0, 3, 6, 1}
	l, err := MNISTLoader(ds, order, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for b, err := range l.Batches(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		x := Input(b, []int{784}, tensor.CPU)
		if s := x.Value.Shape(); s[0] != b.Size() || s[1] != 784 {
			t.Fatalf("input shape %v for a batch of %d", s, b.Size())
		}
		for r, i := range b.Indices {
			for j, v := range x.Value.Data()[r*784 : (r+1)*784] {
				if want := (ds.Images[i*784+j] - PixelMean) / PixelStd; v != want {
					t.Fatalf("sample %d pixel %d = %v, want %v", i, j, v, want)
				}
			}
			if b.Labels[r] != ds.Labels[i] {
				t.Fatalf("sample %d label %d, want %d", i, b.Labels[r], ds.Labels[i])
			}
		}
		got = append(got, b.Indices...)
	}
	if !slices.Equal(got, order) {
		t.Errorf("samples %v, want %v", got, order)
	}
}

// ClassifierStep is the hand-written SGD step, bit for bit.
func TestClassifierStep(t *testing.T) {
	ds := tinyMNIST(16, 2)
	order := []int{3, 1, 4, 15, 9, 2, 6, 5}
	shape := []int{1, 28, 28}
	build := func() (*Classifier, *optim.SGD, *optim.Scheduler) {
		c, err := NewClassifier("cnn", rand.New(rand.NewPCG(7, 0)))
		if err != nil {
			t.Fatal(err)
		}
		opt, err := NewSGD(nn.Parameters(c.Model), 0.05)
		if err != nil {
			t.Fatal(err)
		}
		sched, err := optim.NewScheduler(opt, optim.CosineAnnealingLR{TMax: 4})
		if err != nil {
			t.Fatal(err)
		}
		return c, opt, sched
	}
	a, optA, schedA := build()
	b, optB, schedB := build()
	l, err := MNISTLoader(ds, order, 4)
	if err != nil {
		t.Fatal(err)
	}
	for batch, err := range l.Batches(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		x := Input(batch, shape, tensor.CPU)
		lossA, err := ClassifierStep(context.Background(), Local(a.Model), optA, schedA, x, batch.Labels, nil)
		if err != nil {
			t.Fatal(err)
		}
		lossB := nn.CrossEntropy(b.Model.Forward(x), batch.Labels)
		autograd.Backward(lossB)
		optB.Step()
		optB.ZeroGrad()
		schedB.Step()
		if lossA.Value.Item() != lossB.Value.Item() {
			t.Fatalf("loss %v, by hand %v", lossA.Value.Item(), lossB.Value.Item())
		}
	}
	pa, pb := nn.Parameters(a.Model), nn.Parameters(b.Model)
	for i := range pa {
		if !slices.Equal(pa[i].Value.Data(), pb[i].Value.Data()) {
			t.Fatalf("parameter %d differs from the hand-written step's", i)
		}
	}
	if optA.LR(0) != optB.LR(0) {
		t.Errorf("lr %v, by hand %v", optA.LR(0), optB.LR(0))
	}
}

// Accuracy counts the argmax hits over every sample, past the first
// batch of 1000.
func TestAccuracy(t *testing.T) {
	ds := tinyMNIST(1003, 3)
	c, err := NewClassifier("mlp", rand.New(rand.NewPCG(0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	acc, err := Accuracy(c.Model, ds, c.Shape)
	if err != nil {
		t.Fatal(err)
	}
	correct := 0
	for i := range ds.Len() {
		x := make([]float32, 784)
		for j := range x {
			x[j] = (ds.Images[i*784+j] - PixelMean) / PixelStd
		}
		out := c.Model.Forward(autograd.NewVar(tensorOf(x), false)).Value.Data()
		if int64(slices.Index(out, slices.Max(out))) == ds.Labels[i] {
			correct++
		}
	}
	if want := float64(correct) / float64(ds.Len()); acc != want {
		t.Errorf("Accuracy = %v, want %v", acc, want)
	}
}

// Update clips the global norm at ClipNorm, then steps.
func TestUpdate(t *testing.T) {
	mk := func() (*autograd.Var, *optim.Adam) {
		p := autograd.NewVar(tensorOf([]float32{1, -2, 3}), true)
		p.Grad = tensorOf([]float32{30, 40, 0}) // norm 50
		opt, err := NewAdamW([]*autograd.Var{p})
		if err != nil {
			t.Fatal(err)
		}
		return p, opt
	}
	p, opt := mk()
	if err := Update([]*autograd.Var{p}, opt); err != nil {
		t.Fatal(err)
	}
	q, ref := mk()
	if _, err := optim.ClipGradNorm([]*autograd.Var{q}, 1.0, 2); err != nil {
		t.Fatal(err)
	}
	ref.Step()
	if !slices.Equal(p.Value.Data(), q.Value.Data()) {
		t.Errorf("after Update %v, clip and step by hand %v", p.Value.Data(), q.Value.Data())
	}
	if opt.LR(0) != GPTLR {
		t.Errorf("lr %v, want %v", opt.LR(0), GPTLR)
	}
}

func tensorOf(x []float32) *tensor.Tensor { return tensor.FromSlice(x, 1, len(x)) }

func TestCheckpointFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"-checkpoint-every", "5", "-checkpoint-keep", "0"},
			"prog: warning: -checkpoint-every does nothing without -checkpoint-dir\nprog: warning: -checkpoint-keep does nothing without -checkpoint-dir\n"},
		{[]string{"-checkpoint-dir", "d", "-checkpoint-every", "5"}, ""},
	} {
		fs := flag.NewFlagSet("prog", flag.ContinueOnError)
		var dir string
		var every, keep int
		warn := CheckpointFlags(fs, "prog", &dir, &every, &keep)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var w strings.Builder
		warn(&w)
		if w.String() != tc.want {
			t.Errorf("%q: warned %q, want %q", tc.args, w.String(), tc.want)
		}
		if tc.args == nil && (dir != "" || every != 100 || keep != 2) {
			t.Errorf("defaults: dir %q, every %d, keep %d; want \"\", 100, 2", dir, every, keep)
		}
	}
}
