package nccl

import (
	"context"
	"strings"
	"testing"

	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// fakeTensorGroup is a group over the fake NCCL whose fake device also
// holds the memory of the fake tensor backend's buffers, as a GPU holds a
// CUDA tensor's: the group reduces the tensor's own memory through its
// DevicePtr, with no host copy.
type fakeTensorGroup struct{ *group }

func (g fakeTensorGroup) AllReduceTensor(ctx context.Context, t *tensor.Tensor, op distributed.ReduceOp) distributed.Work {
	g.dev.(*fakeDev).adopt(fakebackend.Bytes(t))
	return g.group.AllReduceTensor(ctx, t, op)
}

func (g fakeTensorGroup) BroadcastTensor(ctx context.Context, t *tensor.Tensor, root int) distributed.Work {
	g.dev.(*fakeDev).adopt(fakebackend.Bytes(t))
	return g.group.BroadcastTensor(ctx, t, root)
}

// TestTensorCollectivesFake: AllReduceTensor and BroadcastTensor run on a
// device tensor's memory in place (worlds 1 to 3); a tensor on another
// device index than the group's GPU, or one without a device address, is
// refused naming the device.
func TestTensorCollectivesFake(t *testing.T) {
	for _, world := range []int{1, 2, 3} {
		runFakeOn(t, &fakeNet{}, world, distributed.Options{}, func(int) int { return 0 }, func(t *testing.T, g *group) {
			ctx := context.Background()
			pg := fakeTensorGroup{g}
			r := g.Rank()
			x := tensor.FromSlice([]float32{float32(r), 1, 2, float32(10 * r)}, 4).To(fakebackend.Device(0))
			dev := g.dev.(*fakeDev)
			nallocs := func() int { dev.mu.Lock(); defer dev.mu.Unlock(); return len(dev.allocs) }
			before := nallocs()
			if err := distributed.AllReduceTensor(ctx, pg, x, distributed.Sum).Wait(); err != nil {
				t.Fatalf("world %d rank %d: %v", world, r, err)
			}
			if n := nallocs() - before; n != 1 { // the tensor's own memory, adopted
				t.Errorf("world %d rank %d: the all-reduce allocated %d staging buffers, want none", world, r, n-1)
			}
			s := float32(world * (world - 1) / 2)
			if got := x.To(tensor.CPU).Data(); got[0] != s || got[1] != float32(world) || got[3] != 10*s {
				t.Errorf("world %d rank %d: all-reduce gave %v", world, r, got)
			}
			y := tensor.Full(float32(r+5), 3).To(fakebackend.Device(0))
			if err := distributed.BroadcastTensor(ctx, pg, y, world-1).Wait(); err != nil {
				t.Fatal(err)
			}
			if got := y.To(tensor.CPU).Data(); got[2] != float32(world+4) {
				t.Errorf("world %d rank %d: broadcast gave %v", world, r, got)
			}
			z := tensor.New(2).To(fakebackend.Device(1))
			if err := g.AllReduceTensor(ctx, z, distributed.Sum).Wait(); err == nil || !strings.Contains(err.Error(), "fake:1") || !strings.Contains(err.Error(), "GPU 0") {
				t.Errorf("all-reduce of a tensor on another device: %v, want an error naming fake:1 and GPU 0", err)
			}
		})
	}
}

// TestDDPConformanceFake runs the data-parallel suite on ddp with every
// rank's model on a fake device and the group of this backend over the
// fake NCCL: the buckets are device tensors reduced in place by NCCL's
// all-reduce (worlds 1 to 4), and the parameters equal one CPU process's.
func TestDDPConformanceFake(t *testing.T) {
	net := &fakeNet{}
	dptest.Run(t, dptest.Wrapper{Name: "ddp over nccl (fake)",
		Device: fakebackend.Device(0),
		Runner: func(t *testing.T, world int, fn func(*testing.T, distributed.ProcessGroup)) {
			runFakeOn(t, net, world, distributed.Options{}, func(int) int { return 0 }, func(t *testing.T, g *group) { fn(t, fakeTensorGroup{g}) })
		},
		Wrap: func(ctx context.Context, mod nn.Module, _ []nn.Module, pg distributed.ProcessGroup, o dptest.Options) (dptest.Model, error) {
			m, err := ddp.WrapModule(ctx, mod, pg, ddp.Options{FindUnusedParameters: o.FindUnusedParameters})
			if err != nil {
				return nil, err
			}
			return dptest.NewReplica(m, mod, o)
		}})
}

// TestChosenForCUDA: a program on a CUDA device that names no backend
// gets this one from Init (here, without a GPU, its load error).
func TestChosenForCUDA(t *testing.T) {
	t.Setenv("COHORT_NCCL_LIBRARY", "/nonexistent/libnccl.so.2")
	_, err := distributed.Init(context.Background(), distributed.Options{Device: tensor.CUDA(0), WorldSize: 1})
	if err == nil || !strings.Contains(err.Error(), "backend nccl: nccl: libnccl not found") {
		t.Errorf("Init on cuda:0 with no backend named = %v, want the nccl backend's error", err)
	}
}
