package cuda

import (
	"time"
	"unsafe"
)

// Event is an event handle (CUevent).
type Event uintptr

const (
	streamNonBlocking  = 1 // CU_STREAM_NON_BLOCKING
	eventDisableTiming = 2 // CU_EVENT_DISABLE_TIMING
)

// NewStream creates a stream. A non-blocking stream does not synchronise
// with the legacy default stream (0). Destroy it with DestroyStream.
func (c *Context) NewStream(nonBlocking bool) (Stream, error) {
	var s Stream
	flags := 0
	if nonBlocking {
		flags = streamNonBlocking
	}
	err := c.call("cuStreamCreate", c.d.f.streamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags))
	return s, err
}

// DestroyStream destroys s; work already enqueued on it still completes.
func (c *Context) DestroyStream(s Stream) error {
	return c.call("cuStreamDestroy_v2", c.d.f.streamDestroy, uintptr(s))
}

// StreamSync blocks until s has finished all its work.
func (c *Context) StreamSync(s Stream) error {
	return c.call("cuStreamSynchronize", c.d.f.streamSynchronize, uintptr(s))
}

// StreamDone reports whether s has finished all its work, without blocking.
func (c *Context) StreamDone(s Stream) (bool, error) {
	return c.query("cuStreamQuery", c.d.f.streamQuery, uintptr(s))
}

// StreamWaitEvent makes future work on s wait until e has completed; it
// does not block the host.
func (c *Context) StreamWaitEvent(s Stream, e Event) error {
	return c.call("cuStreamWaitEvent", c.d.f.streamWaitEvent, uintptr(s), uintptr(e), 0)
}

// NewEvent creates an event; timing events can be used with Elapsed, others
// are cheaper to record and wait for. Destroy it with DestroyEvent.
func (c *Context) NewEvent(timing bool) (Event, error) {
	var e Event
	flags := 0
	if !timing {
		flags = eventDisableTiming
	}
	err := c.call("cuEventCreate", c.d.f.eventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags))
	return e, err
}

// DestroyEvent destroys e.
func (c *Context) DestroyEvent(e Event) error {
	return c.call("cuEventDestroy_v2", c.d.f.eventDestroy, uintptr(e))
}

// Record enqueues e on s: e completes when s reaches this point.
func (c *Context) Record(e Event, s Stream) error {
	return c.call("cuEventRecord", c.d.f.eventRecord, uintptr(e), uintptr(s))
}

// EventSync blocks until e has completed.
func (c *Context) EventSync(e Event) error {
	return c.call("cuEventSynchronize", c.d.f.eventSynchronize, uintptr(e))
}

// EventDone reports whether e has completed, without blocking.
func (c *Context) EventDone(e Event) (bool, error) {
	return c.query("cuEventQuery", c.d.f.eventQuery, uintptr(e))
}

// Elapsed is the device time between two completed timing events
// (cuEventElapsedTime, about 0.5 µs resolution).
func (c *Context) Elapsed(start, end Event) (time.Duration, error) {
	var ms float32
	if err := c.call("cuEventElapsedTime", c.d.f.eventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end)); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// query runs a cu*Query call: CUDA_ERROR_NOT_READY means not done.
func (c *Context) query(name string, fn, h uintptr) (bool, error) {
	err := c.call(name, fn, h)
	if err == nil {
		return true, nil
	}
	if err.(*Error).Code == ErrorNotReady {
		return false, nil
	}
	return false, err
}
