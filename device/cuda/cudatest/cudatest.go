// Package cudatest holds what the tests of the CUDA packages share: cuda:0
// opened for a test or the test skipped, saying why, where there is no
// driver or no device; a library loaded or the test skipped where it is
// not installed; device buffers that are freed when the test ends.
//
// Import it from _test.go files only. The tests that need a GPU are named
// TestGPU…; bench/gpu_check.sh runs them on a GPU machine.
package cudatest

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/cohortml/cohort/device/cuda"
)

// Open opens cuda:0 for t, logs the device and the driver's CUDA version,
// and closes the context when t ends (a failed close fails t). Where the
// driver library or a device is missing it skips t with the reason; any
// other error fails t.
func Open(t testing.TB) *cuda.Context {
	t.Helper()
	c, err := cuda.Open(0)
	if errors.Is(err, cuda.ErrNotFound) || errors.Is(err, cuda.ErrNoDevice) {
		t.Skipf("skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	release(t, c.Close)
	t.Logf("device %v, driver CUDA %s", c.Device, cuda.VersionString(c.Driver().Version))
	return c
}

// Load returns what load loads. Where load's error wraps absent (the
// library's ErrNotFound) it skips t, saying what is not installed;
// any other error fails t.
func Load[L any](t testing.TB, what string, load func() (L, error), absent error) L {
	t.Helper()
	l, err := load()
	if errors.Is(err, absent) {
		t.Skipf("skipped: %s is not installed here: %v", what, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Loader is Load for one library: the function its package's tests call.
func Loader[L any](what string, load func() (L, error), absent error) func(testing.TB) L {
	return func(t testing.TB) L {
		t.Helper()
		return Load(t, what, load, absent)
	}
}

// Alloc allocates n bytes of device memory, freed when t ends.
func Alloc(t testing.TB, c *cuda.Context, n int64) cuda.DevicePtr {
	t.Helper()
	p, err := c.MemAlloc(n)
	return keep(t, p, err, c.MemFree)
}

// Upload copies x to new device memory (see Alloc) and returns its address.
func Upload[T cuda.Elem](t testing.TB, c *cuda.Context, x []T) cuda.DevicePtr {
	t.Helper()
	var zero T
	p := Alloc(t, c, int64(len(x))*int64(unsafe.Sizeof(zero)))
	if err := cuda.ToDevice(c, p, x); err != nil {
		t.Fatal(err)
	}
	return p
}

// Download copies n elements from device address p to a new slice.
func Download[T cuda.Elem](t testing.TB, c *cuda.Context, p cuda.DevicePtr, n int) []T {
	t.Helper()
	x := make([]T, n)
	if err := cuda.FromDevice(c, x, p); err != nil {
		t.Fatal(err)
	}
	return x
}

// Stream creates a non-blocking stream, destroyed when t ends.
func Stream(t testing.TB, c *cuda.Context) cuda.Stream {
	t.Helper()
	s, err := c.NewStream(true)
	return keep(t, s, err, c.DestroyStream)
}

// keep returns v, made by a call that returned err, and has free(v)
// called when t ends; err fails t.
func keep[V any](t testing.TB, v V, err error, free func(V) error) V {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	release(t, func() error { return free(v) })
	return v
}

// release has free called when t ends; an error from it fails t.
func release(t testing.TB, free func() error) {
	t.Cleanup(func() {
		if err := free(); err != nil {
			t.Error(err)
		}
	})
}
