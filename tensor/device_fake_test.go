package tensor_test

import (
	"testing"

	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/devicetest"
)

// Views of a device tensor share its buffer, and results stay on the
// device: nothing moves unless To is called.
func TestDeviceViewsAndResultsStayOnDevice(t *testing.T) {
	dev := fakebackend.Device(0)
	x := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	before := fakebackend.Stats()
	d := x.To(dev)
	tt := d.T()
	if tt.Device() != dev || tt.Buffer() != d.Buffer() {
		t.Fatalf("a view of a device tensor is on %v with another buffer", tt.Device())
	}
	tt.Narrow(0, 1, 1).Fill(0) // column 1 of d, through a view
	r := tt.Reshape(6)         // not contiguous: a copy, still on the device
	c := tt.Contiguous()
	s := tensor.Mean(d)
	for _, u := range []*tensor.Tensor{r, c, tt.Clone(), s, tensor.Add(d, d)} {
		if u.Device() != dev {
			t.Errorf("result on %v, want %v", u.Device(), dev)
		}
	}
	if got := fakebackend.Stats().Sub(before); got.Uploads != 1 || got.Downloads != 0 {
		t.Errorf("%d uploads, %d downloads: want the one explicit move", got.Uploads, got.Downloads)
	}
	want := []float32{1, 0, 3, 4, 0, 6}
	for i, v := range d.To(tensor.CPU).Values() {
		if v != want[i] {
			t.Fatalf("after writing through a view: %v, want %v", d.To(tensor.CPU).Values(), want)
		}
	}
	if got := r.To(tensor.CPU).Values(); got[0] != 1 || got[1] != 4 || got[2] != 0 {
		t.Errorf("Reshape of a transposed device view: %v", got)
	}
	if m := s.To(tensor.CPU).Item(); m != 14.0/6 {
		t.Errorf("Mean = %g, want %g", m, float32(14.0/6))
	}
	rel := fakebackend.Stats().Releases
	tensor.Recycle(tt) // a view: ignored
	tensor.Recycle(c)  // owns its buffer: handed to the backend
	if got := fakebackend.Stats().Releases - rel; got != 1 {
		t.Errorf("%d buffers released, want 1 (the view's is not its own)", got)
	}
	if c.Device() != dev {
		t.Errorf("a recycled device tensor is on %v", c.Device())
	}
	tensor.Add(d, d) // the view's buffer is untouched
	devicetest.MustPanic(t, "Add of a recycled tensor", func() { tensor.Add(c, c) }, "released")
}

func TestDeviceOpsWithoutADeviceForm(t *testing.T) {
	d := tensor.NewOn(fakebackend.Device(0), 2, 3)
	devicetest.MustPanic(t, "ArgMax", func() { tensor.ArgMax(d) }, "tensor: ArgMax: not available on fake:0")
	devicetest.MustPanic(t, "MaxDim", func() { tensor.MaxDim(d, 0, false) }, "tensor: MaxDim", "fake:0")
	devicetest.MustPanic(t, "SoftmaxRows", func() { tensor.SoftmaxRows(d, d) }, "tensor: SoftmaxRows", "fake:0")
	devicetest.MustPanic(t, "LayerNorm", func() { tensor.LayerNorm(d, nil, nil, 1e-5) }, "tensor: LayerNorm", "fake:0")
	devicetest.MustPanic(t, "GemmThen", func() {
		tensor.GemmThen(tensor.NewOn(fakebackend.Device(0), 2, 2), d, d.T(), 1, 0, func(_, _, _, _ int) {})
	}, "tensor: GemmThen", "fake:0")
}

func TestFromBuffer(t *testing.T) {
	d := tensor.FromSlice([]float32{0, 1, 2, 3, 4, 5}, 6).To(fakebackend.Device(0))
	v := tensor.FromBuffer(d.Buffer(), 1, []int{2, 2}, []int{2, 1}) // rows [1 2], [3 4]
	if got := v.To(tensor.CPU).Values(); got[0] != 1 || got[1] != 2 || got[2] != 3 || got[3] != 4 {
		t.Errorf("FromBuffer view = %v", got)
	}
	devicetest.MustPanic(t, "FromBuffer", func() { tensor.FromBuffer(d.Buffer(), 3, []int{2, 2}, []int{2, 1}) }, "tensor: FromBuffer: view")
}
