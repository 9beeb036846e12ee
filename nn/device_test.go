package nn_test

import (
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// To moves parameters, their gradients and buffers in place: the module
// keeps its Vars and buffer tensors, and a state dict from the host loads
// into the moved module.
func TestToMovesInPlace(t *testing.T) {
	dev := fakebackend.Device(0)
	rng := rand.New(rand.NewPCG(1, 2))
	bn := nn.NewBatchNorm2d(3)
	m := nn.NewSequential(nn.NewConv2d(rng, 1, 3, 3, nn.Conv2dOptions{}), bn, nn.NewLinear(rng, 4, 2, true))
	sd := nn.StateDict(m)
	host := map[string][]float32{}
	for k, v := range sd {
		host[k] = v.Values()
	}
	params := nn.Parameters(m)
	params[0].Grad = tensor.Full(0.5, params[0].Value.Shape()...)
	runMean := bn.RunningMean
	nn.To(m, dev)
	for i, p := range nn.Parameters(m) {
		if p != params[i] || p.Value.Device() != dev {
			t.Fatalf("parameter %d: same Var %v, on %v", i, p == params[i], p.Value.Device())
		}
	}
	if params[0].Grad.Device() != dev || params[0].Grad.To(tensor.CPU).Values()[0] != 0.5 {
		t.Errorf("gradient not moved with its value")
	}
	if bn.RunningMean != runMean || runMean.Device() != dev {
		t.Errorf("buffer moved to %v (same tensor %v)", runMean.Device(), bn.RunningMean == runMean)
	}
	for k, v := range nn.StateDict(m) {
		got := v.To(tensor.CPU).Values()
		for i := range got {
			if got[i] != host[k][i] {
				t.Fatalf("%s changed in the move", k)
			}
		}
	}
	// A host state dict loads into the moved module.
	hostSD := map[string]*tensor.Tensor{}
	for k, v := range host {
		w := make([]float32, len(v))
		for i := range w {
			w[i] = float32(i)
		}
		hostSD[k] = tensor.FromSlice(w, sd[k].Shape()...)
	}
	if err := nn.LoadStateDict(m, hostSD); err != nil {
		t.Fatal(err)
	}
	if got := nn.StateDict(m)["2.weight"]; got.Device() != dev || got.To(tensor.CPU).Values()[3] != 3 {
		t.Errorf("LoadStateDict into a moved module: on %v", got.Device())
	}
	nn.To(m, tensor.CPU)
	if params[0].Value.Device() != tensor.CPU || bn.RunningVar.Device() != tensor.CPU {
		t.Errorf("moving back left tensors on the device")
	}
}

func TestVarToRefusesNonLeaves(t *testing.T) {
	x := autograd.NewVar(tensor.New(2), true)
	y := autograd.Scale(x, 2)
	defer func() {
		if r := recover(); r == nil {
			t.Errorf("Var.To of an op's output did not panic")
		}
	}()
	y.To(fakebackend.Device(0))
}
