package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/tensortest"
)

// Options tunes Run. The zero value checks fp32 kernels at 1e-5.
type Options struct {
	// RelTol bounds ‖dev − cpu‖₂ / ‖cpu‖₂ per output; 0 means 1e-5, a
	// negative value demands equal bits.
	RelTol float64
	// Seed seeds the inputs; 0 draws one from the clock (logged).
	Seed uint64
}

// Run checks dev's backend with the default options.
func Run(t *testing.T, dev tensor.Device) { RunWith(t, dev, Options{}) }

// RunWith checks dev's backend (see the package documentation).
func RunWith(t *testing.T, dev tensor.Device, o Options) {
	t.Helper()
	if dev.IsCPU() {
		t.Fatal("devicetest: Run on the CPU: give it an accelerator device")
	}
	if _, ok := tensor.BackendOf(dev); !ok {
		t.Fatalf("devicetest: no backend registered for %v", dev)
	}
	tol := o.RelTol
	if tol == 0 {
		tol = 1e-5
	}
	seed := o.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("devicetest: %v, seed %d, relative tolerance %g", dev, seed, tol)
	s := &suite{dev: dev, tol: tol, seed: seed}
	t.Run("moves", s.moves)
	t.Run("host-accessors", s.hostAccessors)
	t.Run("mixed-devices", s.mixed)
	t.Run("recycle", s.recycle)
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) { s.check(t, c) })
	}
	t.Run("optim", s.optim)
}

type suite struct {
	dev  tensor.Device
	tol  float64
	seed uint64
	n    uint64 // cases drawn so far, for per-case streams
}

func (s *suite) rng() *rand.Rand {
	s.n++
	return rand.New(rand.NewPCG(s.seed, s.n))
}

// opCase is one op applied to inputs: run is called once with host
// tensors and once with the same values on the device, and its outputs
// (which may include inputs it updated in place) are compared.
type opCase struct {
	name   string
	inputs func(r *rand.Rand) []*tensor.Tensor
	run    func(in []*tensor.Tensor) []*tensor.Tensor
}

func (s *suite) check(t *testing.T, c opCase) {
	t.Helper()
	host := c.inputs(s.rng())
	devIn := make([]*tensor.Tensor, len(host))
	for i, h := range host {
		if h != nil {
			devIn[i] = h.To(s.dev)
		}
	}
	want := c.run(host)
	got := c.run(devIn)
	if len(got) != len(want) {
		t.Fatalf("%d outputs on %v, %d on the CPU", len(got), s.dev, len(want))
	}
	for i := range want {
		if (want[i] == nil) != (got[i] == nil) {
			t.Fatalf("output %d: nil on one side only (cpu %v, %v %v)", i, want[i] == nil, s.dev, got[i] == nil)
		}
		if want[i] == nil {
			continue
		}
		if d := got[i].Device(); d != s.dev {
			t.Errorf("output %d is on %v, want %v", i, d, s.dev)
			continue
		}
		if err := compare(want[i], got[i].To(tensor.CPU), s.tol); err != nil {
			t.Errorf("output %d: %v", i, err)
		}
	}
}

// compare checks got against want within the relative bound tol.
func compare(want, got *tensor.Tensor, tol float64) error {
	if !want.SameShape(got) {
		return fmt.Errorf("shape %v, want %v", got.Shape(), want.Shape())
	}
	w, g := want.Values(), got.Values()
	var num, den float64
	for i := range w {
		wn, gn := math.IsNaN(float64(w[i])), math.IsNaN(float64(g[i]))
		if wn || gn {
			if wn != gn {
				return fmt.Errorf("element %d: %g, want %g", i, g[i], w[i])
			}
			continue
		}
		if tol < 0 || math.IsInf(float64(w[i]), 0) {
			if math.Float32bits(w[i]) != math.Float32bits(g[i]) {
				return fmt.Errorf("element %d: %g, want %g (bits)", i, g[i], w[i])
			}
			continue
		}
		d := float64(g[i]) - float64(w[i])
		num += d * d
		den += float64(w[i]) * float64(w[i])
	}
	if tol < 0 {
		return nil // every element compared bit for bit above
	}
	num, den = math.Sqrt(num), math.Sqrt(den)
	if den == 0 {
		if num > tol {
			return fmt.Errorf("‖dev − cpu‖ = %g for a zero result (bound %g)", num, tol)
		}
		return nil
	}
	if num/den > tol {
		return fmt.Errorf("‖dev − cpu‖/‖cpu‖ = %g, bound %g", num/den, tol)
	}
	return nil
}

// randn returns a host tensor of N(0, 1) draws.
func randn(r *rand.Rand, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	t.FillNormal(r, 0, 1)
	return t
}

func randu(r *rand.Rand, lo, hi float32, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	t.FillUniform(r, lo, hi)
	return t
}

func (s *suite) moves(t *testing.T) {
	r := s.rng()
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.SmallestNonzeroFloat32, math.MaxFloat32, 1e-40}
	for _, shape := range [][]int{{}, {0}, {1}, {7}, {3, 5}, {2, 0, 3}, {4, 3, 2}} {
		t.Run(fmt.Sprint(shape), func(t *testing.T) {
			h := randn(r, shape...)
			if h.Len() > 0 {
				d := h.Contiguous().Data()
				for i := range d {
					if i < len(special) {
						d[i] = special[i]
					}
				}
			}
			dt := h.To(s.dev)
			if dt.Device() != s.dev || !dt.SameShape(h) {
				t.Fatalf("To(%v): device %v shape %v", s.dev, dt.Device(), dt.Shape())
			}
			if dt.To(s.dev) != dt {
				t.Errorf("To(its own device) is not a no-op")
			}
			back := dt.To(tensor.CPU)
			if err := compare(h, back, -1); err != nil {
				t.Errorf("round trip: %v", err)
			}
			if h.Dims() == 2 { // a transposed view moves as its values
				tv := h.T().To(s.dev).To(tensor.CPU)
				if err := compare(h.T().Contiguous(), tv, -1); err != nil {
					t.Errorf("transposed view: %v", err)
				}
				// and a view of a device tensor moves back as its values
				dv := dt.T().To(tensor.CPU)
				if err := compare(h.T().Contiguous(), dv, -1); err != nil {
					t.Errorf("device view: %v", err)
				}
			}
		})
	}
}

// MustPanic runs f and checks that it panics with a message holding every
// one of parts; what names f in the errors.
func MustPanic(t testing.TB, what string, f func(), parts ...string) {
	t.Helper()
	if !tensortest.CheckPanic(t, what+": ", f, parts...) {
		t.Errorf("%s: no panic", what)
	}
}

func (s *suite) hostAccessors(t *testing.T) {
	d := tensor.NewOn(s.dev, 2, 3)
	name := s.dev.String()
	MustPanic(t, "Data", func() { d.Data() }, "tensor: Data", name)
	MustPanic(t, "Storage", func() { d.Storage() }, "tensor: Storage", name)
	MustPanic(t, "At", func() { d.At(0, 0) }, "tensor: At", name)
	MustPanic(t, "Set", func() { d.Set(1, 0, 0) }, "tensor: Set", name)
	MustPanic(t, "Item", func() { tensor.NewOn(s.dev).Item() }, "tensor: Item", name)
	MustPanic(t, "Values", func() { d.Values() }, "tensor: Values", name)
	if got := d.String(); !strings.Contains(got, name) {
		t.Errorf("String() = %q, want the device named", got)
	}
}

func (s *suite) mixed(t *testing.T) {
	c, d := tensor.New(2, 2), tensor.NewOn(s.dev, 2, 2)
	dn := s.dev.String()
	MustPanic(t, "Add", func() { tensor.Add(c, d) }, "tensor: Add", "operands on cpu and "+dn)
	MustPanic(t, "Add", func() { tensor.Add(d, c) }, "tensor: Add", "operands on "+dn+" and cpu")
	MustPanic(t, "MatMul", func() { tensor.MatMul(c, d) }, "tensor: MatMul", "cpu", dn)
	MustPanic(t, "AddScaled", func() { tensor.AddScaled(d, 1, c) }, "tensor: AddScaled", "cpu", dn)
	MustPanic(t, "LinearInto", func() { tensor.LinearInto(tensor.New(2, 2), c, d, nil, nil, nil, tensor.Identity) }, "tensor: LinearInto", "cpu", dn)
	MustPanic(t, "SumInto", func() { tensor.SumInto(c, d) }, "tensor: SumInto", "cpu", dn)
	MustPanic(t, "CopyFrom", func() { c.CopyFrom(d) }, "tensor: CopyFrom", "cpu", dn)
	MustPanic(t, "Conv2d", func() { tensor.Conv2d(tensor.New(1, 1, 3, 3), tensor.NewOn(s.dev, 1, 1, 2, 2), nil, 1, 0) }, "tensor: Conv2d", "cpu", dn)
	if other := tensor.NewDevice(s.dev.Kind(), s.dev.Index()+1); true {
		e := tensor.NewOn(other, 2, 2)
		MustPanic(t, "Add across indices", func() { tensor.Add(d, e) }, "tensor: Add", dn, other.String())
	}
}

// recycle hands buffers back through tensor.Recycle (Backend.Release)
// and checks that fresh allocations are zeroed and usable afterwards.
func (s *suite) recycle(t *testing.T) {
	for range 3 {
		x := tensor.FullOn(s.dev, 7, 33, 31)
		tensor.Recycle(x)
		y := tensor.NewOn(s.dev, 33, 31)
		for i, v := range y.To(tensor.CPU).Values() {
			if v != 0 {
				t.Fatalf("NewOn after Recycle: element %d = %g, want 0", i, v)
			}
		}
		tensor.Recycle(y.T()) // a view: ignored
		y.Fill(2)
		if v := tensor.Sum(y).To(tensor.CPU).Item(); v != 2*33*31 {
			t.Fatalf("after recycling a view: sum %g, want %d", v, 2*33*31)
		}
	}
}

func (s *suite) optim(t *testing.T) {
	b, _ := tensor.BackendOf(s.dev)
	k, ok := b.(optim.DeviceKernels)
	if !ok {
		t.Fatalf("the backend of %v does not implement optim.DeviceKernels", s.dev)
	}
	for _, n := range []int{0, 1, 7, 1000} {
		for _, c := range []struct {
			name string
			h    optim.AdamHyper
		}{
			{"adam", optim.AdamHyper{LR: 1e-3, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}},
			{"adamw", optim.AdamHyper{LR: 1e-3, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Decoupled: true}},
			{"adamw-amsgrad-maximize", optim.AdamHyper{LR: 3e-4, WeightDecay: 0.01, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, Decoupled: true, AMSGrad: true, Maximize: true}},
		} {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				r := s.rng()
				p, g, m, v := randn(r, n), randn(r, n), randn(r, n), randu(r, 0, 1, n)
				var vmax *tensor.Tensor
				if c.h.AMSGrad {
					vmax = randu(r, 0, 1, n)
				}
				dp, dg, dm, dv := p.To(s.dev), g.To(s.dev), m.To(s.dev), v.To(s.dev)
				var dvmax *tensor.Tensor
				var hvmax []float32
				if vmax != nil {
					dvmax, hvmax = vmax.To(s.dev), vmax.Data()
				}
				for step := int64(1); step <= 3; step++ {
					optim.AdamUpdate(p.Data(), g.Data(), optim.AdamState{ExpAvg: m.Data(), ExpAvgSq: v.Data(), MaxExpAvgSq: hvmax}, c.h, step)
					k.AdamUpdate(dp, dg, dm, dv, dvmax, c.h, step)
				}
				for i, pair := range [][2]*tensor.Tensor{{p, dp}, {m, dm}, {v, dv}, {vmax, dvmax}} {
					if pair[0] == nil {
						continue
					}
					if err := compare(pair[0], pair[1].To(tensor.CPU), s.tol); err != nil {
						t.Errorf("tensor %d (param, exp_avg, exp_avg_sq, max): %v", i, err)
					}
				}
			})
		}
		for _, c := range []struct {
			name string
			h    optim.SGDHyper
		}{
			{"sgd", optim.SGDHyper{LR: 0.1}},
			{"sgd-momentum-wd", optim.SGDHyper{LR: 0.05, WeightDecay: 1e-4, Momentum: 0.9, Dampening: 0.1}},
			{"sgd-nesterov-maximize", optim.SGDHyper{LR: 0.05, Momentum: 0.9, Nesterov: true, Maximize: true}},
		} {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				r := s.rng()
				p, g := randn(r, n), randn(r, n)
				var buf, dbuf *tensor.Tensor
				var hbuf []float32
				if c.h.Momentum != 0 {
					buf = tensor.New(n)
					dbuf, hbuf = buf.To(s.dev), buf.Data()
				}
				dp, dg := p.To(s.dev), g.To(s.dev)
				for step := int64(1); step <= 3; step++ {
					optim.SGDUpdate(p.Data(), g.Data(), hbuf, c.h, step)
					k.SGDUpdate(dp, dg, dbuf, c.h, step)
				}
				if err := compare(p, dp.To(tensor.CPU), s.tol); err != nil {
					t.Errorf("param: %v", err)
				}
				if buf != nil {
					if err := compare(buf, dbuf.To(tensor.CPU), s.tol); err != nil {
						t.Errorf("momentum buffer: %v", err)
					}
				}
			})
		}
		for _, p := range []float64{1, 2, 3, math.Inf(1)} {
			t.Run(fmt.Sprintf("grad-norm/p=%g/n=%d", p, n), func(t *testing.T) {
				g := randn(s.rng(), n)
				want := optim.NormPart(g.Data(), p)
				got := k.GradNorm(g.To(s.dev), p)
				if d := math.Abs(got - want); d > s.tol*math.Abs(want) && !(s.tol < 0 && got == want) {
					t.Errorf("GradNorm = %g, CPU %g", got, want)
				}
			})
		}
	}
}
