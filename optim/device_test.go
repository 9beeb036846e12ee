package optim_test

import (
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// An optimizer built over device parameters keeps its state there and
// its state dict round-trips through the host.
func TestAdamStateOnDevice(t *testing.T) {
	dev := fakebackend.Device(0)
	build := func() (*autograd.Var, *optim.Adam) {
		p := autograd.NewVar(tensor.FromSlice([]float32{1, -2, 3}, 3).To(dev), true)
		a, err := optim.NewAdamW([]optim.Group{{Params: []*autograd.Var{p}, LR: 0.1}}, optim.AdamOptions{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, AMSGrad: true})
		if err != nil {
			t.Fatal(err)
		}
		return p, a
	}
	p, a := build()
	p.Grad = tensor.FromSlice([]float32{0.5, 0.5, -1}, 3).To(dev)
	a.Step()
	sd := a.StateDict()
	for k, v := range sd.Tensors {
		if v.Device() != dev {
			t.Errorf("state %s on %v", k, v.Device())
		}
	}
	host := &optim.StateDict{Kind: sd.Kind, Scalars: sd.Scalars, Tensors: map[string]*tensor.Tensor{}}
	for k, v := range sd.Tensors {
		host.Tensors[k] = v.To(tensor.CPU)
	}
	_, b := build()
	if err := b.LoadStateDict(host); err != nil {
		t.Fatal(err)
	}
	for k, v := range b.StateDict().Tensors {
		want, got := host.Tensors[k].Values(), v.To(tensor.CPU).Values()
		for i := range want {
			if want[i] != got[i] {
				t.Fatalf("%s = %v after loading, want %v", k, got, want)
			}
		}
	}
}

// A parameter moved after its optimizer was built is refused, naming both
// devices.
func TestStepRefusesMovedParameter(t *testing.T) {
	p := autograd.NewVar(tensor.New(4), true)
	s, err := optim.NewSGD([]optim.Group{{Params: []*autograd.Var{p}, LR: 0.1}}, optim.SGDOptions{Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	p.To(fakebackend.Device(0))
	p.Grad = tensor.NewOn(fakebackend.Device(0), 4)
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("no panic")
		}
		if msg, _ := r.(string); !strings.Contains(msg, "optim: SGD.Step: parameter 0: operands on cpu and fake:0") {
			t.Errorf("panic %v, want it to name the op and both devices", r)
		}
	}()
	s.Step()
}
