package nccl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/device/cuda"
	devnccl "github.com/cohortml/cohort/device/nccl"
	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/nccl"
	"github.com/cohortml/cohort/distributed/grouptest"
)

// TestInitWithoutNCCL: where libnccl is missing, Init fails at once with
// one line naming libnccl and where it looked.
func TestInitWithoutNCCL(t *testing.T) {
	t.Setenv("COHORT_NCCL_LIBRARY", t.TempDir()+"/libnccl.so.2")
	_, err := distributed.Init(context.Background(), distributed.Options{Backend: "nccl", WorldSize: 1})
	if err == nil {
		t.Fatal("Init with a missing libnccl: no error")
	}
	msg := err.Error()
	if !errors.Is(err, devnccl.ErrNotFound) || strings.Contains(msg, "\n") ||
		!strings.HasPrefix(msg, "distributed: Init: backend nccl: nccl: libnccl not found (looked in COHORT_NCCL_LIBRARY=") {
		t.Errorf("error %q: want one line naming libnccl and COHORT_NCCL_LIBRARY", msg)
	}
}

// gpu skips t unless NCCL and a CUDA device are here.
func gpu(t *testing.T) {
	t.Helper()
	if _, err := devnccl.Load(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	c, err := cuda.Open(0)
	if err != nil {
		t.Skipf("skipped: no CUDA device: %v", err)
	}
	c.Close()
}

// TestGPUConformance runs grouptest on the real NCCL at world 1 (one GPU:
// every collective goes through NCCL's kernels on the communication
// stream, staged through device memory). A machine with several GPUs runs
// world 2+ through cohort run (bench/gpu_check.sh).
func TestGPUConformance(t *testing.T) {
	gpu(t)
	grouptest.Test(t, func(t *testing.T, world int, fn func(*testing.T, distributed.ProcessGroup)) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pg, err := distributed.Init(ctx, distributed.Options{Backend: "nccl", WorldSize: world,
			Group: distributed.GroupOptions{Timeout: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := pg.Close(); err != nil {
				t.Error(err)
			}
		}()
		fn(t, pg)
	}, grouptest.Config{Worlds: []int{1}, LargeCount: 1<<20 + 3})
}

// TestGPUAllReduceDevice: the device data path, on device memory the
// caller owns, ordered by WaitStream on another stream.
func TestGPUAllReduceDevice(t *testing.T) {
	gpu(t)
	ctx := context.Background()
	pg, err := distributed.Init(ctx, distributed.Options{Backend: "nccl", WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	c, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 1 << 20
	p, err := c.MemAlloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(p)
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i % 1000)
	}
	if err := cuda.ToDevice(c, p, src); err != nil {
		t.Fatal(err)
	}
	dg := pg.(interface {
		AllReduceDevice(context.Context, devnccl.Ptr, int, distributed.DType, distributed.ReduceOp) distributed.Work
	})
	w := dg.AllReduceDevice(ctx, devnccl.Ptr(p), n, distributed.Float32, distributed.Sum)
	s, err := c.NewStream(true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.DestroyStream(s)
	if err := w.(interface{ WaitStream(devnccl.Stream) error }).WaitStream(devnccl.Stream(s)); err != nil {
		t.Fatal(err)
	}
	if err := c.StreamSync(s); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := cuda.FromDevice(c, got, p); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != src[i] {
			t.Fatalf("element %d = %v, want %v (world 1 sum)", i, got[i], src[i])
		}
	}
}
