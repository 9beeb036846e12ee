package alloc_test

import (
	"errors"
	"testing"

	"github.com/cohortml/cohort/device/alloc"
	"github.com/cohortml/cohort/device/alloc/memtest"
	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/cuda/cudatest"
)

// TestGPUMemConformance holds cuMemAlloc, cuMemFree and events to the
// contract the fake device is held to.
func TestGPUMemConformance(t *testing.T) {
	c := cudatest.Open(t)
	s1, s2 := cudatest.Stream(t, c), cudatest.Stream(t, c)
	memtest.Run(t, alloc.CUDA(c), alloc.Stream(s1), alloc.Stream(s2))
}

// TestGPUAllocator runs the allocator over real device memory: blocks
// hold data, a freed block is reused on its stream, a cross-stream free
// waits for its event, EmptyCache returns memory, and a request beyond
// the device is an *OutOfMemoryError with the device's figures.
func TestGPUAllocator(t *testing.T) {
	c := cudatest.Open(t)
	s1, s2 := cudatest.Stream(t, c), cudatest.Stream(t, c)
	a := alloc.New(alloc.CUDA(c))

	var blocks []*alloc.Block
	for i, n := range []int64{1, 1000, 1 << 20, 3<<20 + 5, 64 << 20} {
		b, err := a.Alloc(n, alloc.Stream(s1))
		if err != nil {
			t.Fatal(err)
		}
		words := max(n/4, 1)
		if err := c.Memset32(cuda.DevicePtr(b.Ptr()), uint32(i+1), words); err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
	}
	for i, b := range blocks {
		if b.Size() < 4 {
			continue
		}
		got := make([]uint32, b.Size()/4)
		if err := cuda.FromDevice(c, got, cuda.DevicePtr(b.Ptr())); err != nil {
			t.Fatal(err)
		}
		if got[0] != uint32(i+1) || got[len(got)-1] != uint32(i+1) {
			t.Errorf("block %d holds %d … %d, want %d (blocks overlap?)", i, got[0], got[len(got)-1], i+1)
		}
	}
	st := a.Stats()
	t.Logf("after 5 allocations: %v", st)
	if st.Segments != 3 {
		t.Errorf("segments %d, want 3 (one small, two large)", st.Segments)
	}
	p := blocks[1].Ptr()
	a.Free(blocks[1])
	b, _ := a.Alloc(1000, alloc.Stream(s1))
	if b.Ptr() != p {
		t.Errorf("a freed block was not reused on its stream")
	}
	a.RecordStream(b, alloc.Stream(s2))
	a.Free(b)
	if a.Stats().PendingBytes == 0 {
		t.Errorf("a cross-stream free is not pending")
	}
	c.StreamSync(s2)
	for _, b := range []*alloc.Block{blocks[0], blocks[2], blocks[3], blocks[4]} {
		a.Free(b)
	}
	free0, _, _ := c.MemInfo()
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	free1, _, _ := c.MemInfo()
	if st := a.Stats(); st.ReservedBytes != 0 || free1 <= free0 {
		t.Errorf("after EmptyCache: %v; device free %d → %d", st, free0, free1)
	}
	_, err := a.Alloc(c.Device.TotalBytes, alloc.Stream(s1))
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) || oom.TotalBytes != c.Device.TotalBytes || oom.FreeBytes <= 0 {
		t.Fatalf("Alloc(total) = %v, want an *OutOfMemoryError with the device's figures", err)
	}
	t.Log(err)
}
