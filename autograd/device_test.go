package autograd_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/tensor"
)

// The elementwise ops' gradients on a device are tensor ops doing the CPU
// derivative's float32 operations in its order: equal bit for bit.
func TestUnaryGradientsOnFakeDevice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := tensor.New(4, 7)
	x.FillUniform(rng, 0.1, 3) // positive: Log, Sqrt and Pow need it
	g := tensor.New(4, 7)
	g.FillNormal(rng, 0, 1)
	for _, c := range []struct {
		name string
		f    func(*autograd.Var) *autograd.Var
	}{
		{"exp", autograd.Exp}, {"log", autograd.Log}, {"sqrt", autograd.Sqrt}, {"square", autograd.Square},
		{"pow", func(v *autograd.Var) *autograd.Var { return autograd.Pow(v, 2.5) }},
		{"tanh", autograd.Tanh}, {"sigmoid", autograd.Sigmoid}, {"relu", autograd.ReLU}, {"gelu-tanh", autograd.GELUTanh},
		{"softmax", func(v *autograd.Var) *autograd.Var { return autograd.Softmax(v, 1) }},
		{"log-softmax", func(v *autograd.Var) *autograd.Var { return autograd.LogSoftmax(v, 0) }},
		{"mean", func(v *autograd.Var) *autograd.Var { return autograd.Mul(autograd.Mean(v), autograd.Sum(v)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var grads [2][]float32
			for i, dev := range []tensor.Device{tensor.CPU, fakebackend.Device(0)} {
				v := autograd.NewVar(x.To(dev), true)
				y := c.f(v)
				w := g
				if y.Value.Len() == 1 {
					w = tensor.Scalar(1.5)
				}
				autograd.Backward(autograd.Sum(autograd.Mul(y, autograd.NewVar(w.Reshape(y.Value.Shape()...).To(dev), false))))
				if d := v.Grad.Device(); d != dev {
					t.Fatalf("gradient on %v, want %v", d, dev)
				}
				grads[i] = v.Grad.To(tensor.CPU).Values()
			}
			for j := range grads[0] {
				if math.Float32bits(grads[0][j]) != math.Float32bits(grads[1][j]) {
					t.Fatalf("gradient %d = %g on the fake device, %g on the CPU", j, grads[1][j], grads[0][j])
				}
			}
		})
	}
}

func TestUnaryGradientsUnavailableOnDevice(t *testing.T) {
	x := autograd.NewVar(tensor.New(3).To(fakebackend.Device(0)), true)
	for name, f := range map[string]func(*autograd.Var) *autograd.Var{"Abs": autograd.Abs, "SiLU": autograd.SiLU} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, "autograd: "+name) || !strings.Contains(msg, "fake:0") {
					t.Errorf("%s on a device: panic %q, want one naming the op and the device", name, msg)
				}
			}()
			f(x)
		}()
	}
}
