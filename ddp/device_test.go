package ddp

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

func deviceMLP() *nn.Sequential {
	rng := rand.New(rand.NewPCG(1, 2))
	return nn.NewSequential(nn.NewLinear(rng, 8, 16, true), nn.ReLU{}, nn.NewLinear(rng, 16, 4, true))
}

// TestDeviceBuckets: with the model on a (fake) device, the buckets are
// device tensors reduced through the group's AllReduceTensor, one per
// bucket, and every gradient is a view of them on the device.
func TestDeviceBuckets(t *testing.T) {
	dev := fakebackend.Device(0)
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		g := distributedtest.DeviceGroup(pg)
		mod := deviceMLP()
		nn.To(mod, dev)
		// Several buckets: the first holds the last layer's 68 floats.
		m, err := Wrap(context.Background(), mod, g, Options{FirstBucketCapBytes: 4 * 68, BucketCapBytes: 4 * 68})
		if err != nil {
			t.Fatalf("rank %d: %v", pg.Rank(), err)
		}
		defer m.Close()
		after := g.Tensors // Wrap's broadcasts of the parameters
		if after != 4 {
			t.Errorf("rank %d: Wrap broadcast %d device tensors, want the 4 parameters", pg.Rank(), after)
		}
		n := len(m.Plan().Buckets) // the plan of the first step (rebuilt after it)
		x := autograd.NewVar(tensor.Full(float32(pg.Rank()+1), 3, 8).To(dev), false)
		out, err := m.Forward(context.Background(), x)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(context.Background(), autograd.Mean(out)); err != nil {
			t.Fatalf("rank %d: %v", pg.Rank(), err)
		}
		if g.Tensors-after != n || n < 2 {
			t.Errorf("rank %d: %d device all-reduces for %d buckets", pg.Rank(), g.Tensors-after, n)
		}
		if m.flat != nil || m.flatDev == nil || m.flatDev.Device() != dev {
			t.Errorf("rank %d: flat buffer: host %d floats, device %v; want it on %v only", pg.Rank(), len(m.flat), m.flatDev, dev)
		}
		for _, np := range mod.NamedParameters() {
			if gr := np.Param.Grad; gr == nil || gr.Device() != dev || gr.Buffer() != m.flatDev.Buffer() {
				t.Errorf("rank %d: %s's gradient is not a view of the device bucket", pg.Rank(), np.Name)
			}
		}
	})
}

// TestDeviceRefused: a model on a device over a backend that takes host
// memory only is refused at Wrap, naming the device and the backend; a
// device collective through it fails the same way.
func TestDeviceRefused(t *testing.T) {
	dev := fakebackend.Device(0)
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		mod := deviceMLP()
		nn.To(mod, dev)
		_, err := Wrap(context.Background(), mod, pg, Options{})
		if err == nil || !strings.Contains(err.Error(), "fake:0") || !strings.Contains(err.Error(), `"native"`) {
			t.Errorf("rank %d: Wrap of a device model over the native backend: %v, want an error naming fake:0 and \"native\"", pg.Rank(), err)
		}
		err = distributed.AllReduceTensor(context.Background(), pg, tensor.NewOn(dev, 4), distributed.Sum).Wait()
		if err == nil || !strings.Contains(err.Error(), "fake:0") || !strings.Contains(err.Error(), `"native"`) {
			t.Errorf("rank %d: AllReduceTensor of a device tensor over native: %v", pg.Rank(), err)
		}
	})
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		mod := deviceMLP()
		if pg.Rank() == 1 {
			nn.To(mod.Layers[2].(nn.Module), dev)
		}
		if pg.Rank() == 1 {
			_, err := Wrap(context.Background(), mod, distributedtest.DeviceGroup(pg), Options{})
			if err == nil || !strings.Contains(err.Error(), "one device") {
				t.Errorf("rank 1: Wrap of a model on two devices: %v, want an error naming both", err)
			}
		}
	})
}
