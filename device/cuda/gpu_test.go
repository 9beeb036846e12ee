package cuda_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/cuda/cudatest"
	"github.com/cohortml/cohort/device/nvrtc"
)

// The tests named GPU need a device; they skip with the reason elsewhere
// (cudatest.Open). bench/gpu_check.sh runs them on a GPU machine.

func TestGPUInit(t *testing.T) {
	c := cudatest.Open(t)
	if c.Device.Major < 5 || c.Device.SMs < 1 || c.Device.TotalBytes < 1<<30 || c.Device.Name == "" {
		t.Errorf("implausible device %+v", c.Device)
	}
	free, total, err := c.MemInfo()
	if err != nil || free <= 0 || total != c.Device.TotalBytes {
		t.Errorf("MemInfo = %d, %d, %v (device total %d)", free, total, err, c.Device.TotalBytes)
	}
}

func TestGPUCopyRoundTrip(t *testing.T) {
	c := cudatest.Open(t)
	for _, n := range []int{1, 1000, 1<<20 + 3} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(i)*0.5 - 7
		}
		a, err := c.MemAlloc(int64(4 * n))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.MemAlloc(int64(4 * n))
		if err != nil {
			t.Fatal(err)
		}
		if err := cuda.ToDevice(c, a, src); err != nil {
			t.Fatal(err)
		}
		if err := c.CopyDtoD(b, a, int64(4*n)); err != nil {
			t.Fatal(err)
		}
		got := cudatest.Download[float32](t, c, b, n)
		for i := range src {
			if got[i] != src[i] {
				t.Fatalf("n=%d: got[%d] = %v, want %v", n, i, got[i], src[i])
			}
		}
		// Async on a stream through pinned memory, then memset.
		s, err := c.NewStream(true)
		if err != nil {
			t.Fatal(err)
		}
		pinned, err := c.HostAlloc(4 * n)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Memset32Async(b, math.Float32bits(2.5), int64(n), s); err != nil {
			t.Fatal(err)
		}
		if err := c.CopyDtoHAsync(unsafe.Pointer(&pinned[0]), b, int64(4*n), s); err != nil {
			t.Fatal(err)
		}
		if err := c.StreamSync(s); err != nil {
			t.Fatal(err)
		}
		f := unsafe.Slice((*float32)(unsafe.Pointer(&pinned[0])), n)
		if f[0] != 2.5 || f[n-1] != 2.5 {
			t.Errorf("n=%d: after memset %v … %v, want 2.5", n, f[0], f[n-1])
		}
		for _, err := range []error{c.HostFree(pinned), c.DestroyStream(s), c.MemFree(a), c.MemFree(b)} {
			if err != nil {
				t.Error(err)
			}
		}
	}
}

const saxpySrc = `
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}
`

// loadSaxpy compiles saxpySrc with NVRTC for arch (skipping where NVRTC
// is not installed) and loads its PTX or, with cubin, its CUBIN.
func loadSaxpy(t *testing.T, c *cuda.Context, arch string, cubin bool) (*cuda.Module, cuda.Function) {
	t.Helper()
	p, err := nvrtc.Compile(saxpySrc, "saxpy.cu", nvrtc.Options{Arch: arch})
	if errors.Is(err, nvrtc.ErrNotFound) {
		t.Skipf("skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var m *cuda.Module
	if cubin {
		m, err = c.LoadCUBIN(p.CUBIN)
	} else {
		m, err = c.LoadModule(p.PTX)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unload() })
	f, err := m.Function("saxpy")
	if err != nil {
		t.Fatal(err)
	}
	return m, f
}

// runSaxpy launches saxpy over x and y in blocks of block threads and
// returns the device's a·x + y.
func runSaxpy(t *testing.T, c *cuda.Context, f cuda.Function, a float32, x, y []float32, block int) []float32 {
	t.Helper()
	n := len(x)
	dx, dy := cudatest.Upload(t, c, x), cudatest.Upload(t, c, y)
	var args cuda.Args
	args.Int(n).F32(a).Ptr(dx).Ptr(dy)
	if err := c.Launch(f, cuda.Dim3{X: (n + block - 1) / block}, cuda.Dim3{X: block}, 0, 0, &args); err != nil {
		t.Fatal(err)
	}
	return cudatest.Download[float32](t, c, dy, n)
}

func TestGPUSaxpy(t *testing.T) {
	c := cudatest.Open(t)
	m, f := loadSaxpy(t, c, c.Device.Arch(), false)
	if _, err := m.Function("no_such_kernel"); err == nil {
		t.Error("Function(no_such_kernel): no error")
	}
	const n = 1<<20 + 7
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i%1000)/7, float32(i%13)
	}
	got := runSaxpy(t, c, f, 3, x, y, 256)
	for i := range got {
		if want := 3*x[i] + y[i]; got[i] != want {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
}

// TestGPUSaxpyCUBIN loads device code compiled by NVRTC for exactly this
// GPU (sm_XX), which needs no JIT and no driver newer than NVRTC.
func TestGPUSaxpyCUBIN(t *testing.T) {
	c := cudatest.Open(t)
	_, f := loadSaxpy(t, c, fmt.Sprintf("sm_%d%d", c.Device.Major, c.Device.Minor), true)
	const n = 1000
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i), 1
	}
	got := runSaxpy(t, c, f, -2, x, y, 128)
	for i := range got {
		if want := -2*float32(i) + 1; got[i] != want {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
	if r, err := c.Registers(f); err != nil || r <= 0 {
		t.Errorf("Registers = %d, %v", r, err)
	}
}

func TestGPUEvents(t *testing.T) {
	c := cudatest.Open(t)
	s1, s2 := cudatest.Stream(t, c), cudatest.Stream(t, c)
	start, _ := c.NewEvent(true)
	end, _ := c.NewEvent(true)
	defer c.DestroyEvent(start)
	defer c.DestroyEvent(end)
	const n = 256 << 20
	a, b := cudatest.Alloc(t, c, n), cudatest.Alloc(t, c, n)
	// s1 writes a; s2 waits for s1's event, then copies a to b: b must hold
	// s1's value.
	if err := c.Record(start, s1); err != nil {
		t.Fatal(err)
	}
	c.Memset8Async(a, 0x5a, n, s1)
	c.Record(end, s1)
	if err := c.StreamWaitEvent(s2, end); err != nil {
		t.Fatal(err)
	}
	c.CopyDtoDAsync(b, a, n, s2)
	if err := c.StreamSync(s2); err != nil {
		t.Fatal(err)
	}
	if done, err := c.EventDone(end); !done || err != nil {
		t.Errorf("EventDone after the waiting stream finished = %v, %v", done, err)
	}
	tail := cudatest.Download[byte](t, c, b+n-16, 16)
	for _, v := range tail {
		if v != 0x5a {
			t.Fatalf("b's tail %x: the copy did not wait for the memset", tail)
		}
	}
	d, err := c.Elapsed(start, end)
	if err != nil {
		t.Fatal(err)
	}
	bw := float64(n) / d.Seconds() / 1e9
	t.Logf("memset 256 MiB: %v (%.0f GB/s)", d, bw)
	if d <= 0 || d > 5*time.Second {
		t.Errorf("elapsed %v", d)
	}
}

func TestGPUOutOfMemory(t *testing.T) {
	c := cudatest.Open(t)
	_, err := c.MemAlloc(c.Device.TotalBytes * 2)
	if !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Fatalf("MemAlloc(2×total) = %v, want ErrOutOfMemory", err)
	}
	t.Log(err)
}

func TestGPUBadPTX(t *testing.T) {
	c := cudatest.Open(t)
	_, err := c.LoadModule(".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k() { bogus; }\n")
	var ce *cuda.Error
	if !errors.As(err, &ce) || ce.Detail == "" {
		t.Fatalf("LoadModule(bad PTX) = %v, want a *Error with the JIT log", err)
	}
	t.Log(err)
}
