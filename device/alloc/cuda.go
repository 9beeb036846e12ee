package alloc

import (
	"errors"
	"fmt"

	"github.com/cohortml/cohort/device/cuda"
)

// CUDA is the Mem of a CUDA context: cuMemAlloc and cuMemFree for
// memory, events without timing for cross-stream frees.
func CUDA(c *cuda.Context) Mem { return cudaMem{c} }

type cudaMem struct{ c *cuda.Context }

func (m cudaMem) Alloc(n int64) (Ptr, error) {
	p, err := m.c.MemAlloc(n)
	if errors.Is(err, cuda.ErrOutOfMemory) {
		return 0, fmt.Errorf("%w: %w", ErrMemFull, err)
	}
	return Ptr(p), err
}

func (m cudaMem) Free(p Ptr) error                     { return m.c.MemFree(cuda.DevicePtr(p)) }
func (m cudaMem) Info() (free, total int64, err error) { return m.c.MemInfo() }

func (m cudaMem) RecordEvent(s Stream) (Event, error) {
	e, err := m.c.NewEvent(false)
	if err != nil {
		return 0, err
	}
	if err := m.c.Record(e, cuda.Stream(s)); err != nil {
		m.c.DestroyEvent(e)
		return 0, err
	}
	return Event(e), nil
}

func (m cudaMem) EventDone(e Event) (bool, error) { return m.c.EventDone(cuda.Event(e)) }
func (m cudaMem) SyncEvent(e Event) error         { return m.c.EventSync(cuda.Event(e)) }
func (m cudaMem) DestroyEvent(e Event) error      { return m.c.DestroyEvent(cuda.Event(e)) }
