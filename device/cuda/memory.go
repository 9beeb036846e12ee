package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// DevicePtr is a device address (CUdeviceptr).
type DevicePtr uint64

// Stream is a stream handle (CUstream); 0 is the legacy default stream,
// which synchronises with every other blocking stream.
type Stream uintptr

// MemAlloc allocates n bytes of device memory (cuMemAlloc). Out of memory
// wraps ErrOutOfMemory. The memory is uninitialised and owned by the
// caller until MemFree.
func (c *Context) MemAlloc(n int64) (DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuda: cuMemAlloc: size %d must be positive", n)
	}
	var p DevicePtr
	if err := c.call("cuMemAlloc_v2", c.d.f.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)); err != nil {
		err.(*Error).Detail = fmt.Sprintf("%d bytes requested", n)
		return 0, err
	}
	return p, nil
}

// MemFree frees memory from MemAlloc. It synchronises with the device
// (the driver waits for pending work on the memory).
func (c *Context) MemFree(p DevicePtr) error {
	return c.call("cuMemFree_v2", c.d.f.memFree, uintptr(p))
}

// MemInfo returns the device's free and total memory (cuMemGetInfo).
func (c *Context) MemInfo() (free, total int64, err error) {
	var f, t uintptr
	err = c.call("cuMemGetInfo_v2", c.d.f.memGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t)))
	return int64(f), int64(t), err
}

// HostAlloc allocates n bytes of page-locked host memory (cuMemAllocHost),
// which async copies can use without staging. Free it with HostFree; the
// slice must not be used afterwards.
func (c *Context) HostAlloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: cuMemAllocHost: size %d must be positive", n)
	}
	var p *byte
	if err := c.call("cuMemAllocHost_v2", c.d.f.memAllocHost, uintptr(unsafe.Pointer(&p)), uintptr(n)); err != nil {
		return nil, err
	}
	return unsafe.Slice(p, n), nil
}

// HostFree frees memory from HostAlloc.
func (c *Context) HostFree(b []byte) error {
	return c.call("cuMemFreeHost", c.d.f.memFreeHost, uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// Memset8 sets n bytes at p to v; it blocks until done.
func (c *Context) Memset8(p DevicePtr, v byte, n int64) error {
	return c.call("cuMemsetD8_v2", c.d.f.memsetD8, uintptr(p), uintptr(v), uintptr(n))
}

// Memset32 sets n 32-bit words at p (4-byte aligned) to v; it blocks until done.
func (c *Context) Memset32(p DevicePtr, v uint32, n int64) error {
	return c.call("cuMemsetD32_v2", c.d.f.memsetD32, uintptr(p), uintptr(v), uintptr(n))
}

// Memset8Async enqueues Memset8 on s.
func (c *Context) Memset8Async(p DevicePtr, v byte, n int64, s Stream) error {
	return c.call("cuMemsetD8Async", c.d.f.memsetD8Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s))
}

// Memset32Async enqueues Memset32 on s.
func (c *Context) Memset32Async(p DevicePtr, v uint32, n int64, s Stream) error {
	return c.call("cuMemsetD32Async", c.d.f.memsetD32Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s))
}

// CopyHtoD copies n bytes from host memory at src to dst; it returns when
// the copy is done. src must stay valid for the call.
func (c *Context) CopyHtoD(dst DevicePtr, src unsafe.Pointer, n int64) error {
	return c.call("cuMemcpyHtoD_v2", c.d.f.memcpyHtoD, uintptr(dst), uintptr(src), uintptr(n))
}

// CopyDtoH copies n bytes from src to host memory at dst; it returns when
// the copy is done.
func (c *Context) CopyDtoH(dst unsafe.Pointer, src DevicePtr, n int64) error {
	return c.call("cuMemcpyDtoH_v2", c.d.f.memcpyDtoH, uintptr(dst), uintptr(src), uintptr(n))
}

// CopyDtoD copies n bytes between device buffers.
func (c *Context) CopyDtoD(dst, src DevicePtr, n int64) error {
	return c.call("cuMemcpyDtoD_v2", c.d.f.memcpyDtoD, uintptr(dst), uintptr(src), uintptr(n))
}

// CopyHtoDAsync enqueues a host-to-device copy on s. The host memory must
// stay valid and unchanged until s has passed the copy: use pinned memory
// (HostAlloc) for copies that overlap with compute; from Go memory the
// driver stages the copy and may return before it has read src.
func (c *Context) CopyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n int64, s Stream) error {
	return c.call("cuMemcpyHtoDAsync_v2", c.d.f.memcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

// CopyDtoHAsync enqueues a device-to-host copy on s; dst must stay valid
// until s has passed it, and is not written before then.
func (c *Context) CopyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n int64, s Stream) error {
	return c.call("cuMemcpyDtoHAsync_v2", c.d.f.memcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

// CopyDtoDAsync enqueues a device-to-device copy on s.
func (c *Context) CopyDtoDAsync(dst, src DevicePtr, n int64, s Stream) error {
	return c.call("cuMemcpyDtoDAsync_v2", c.d.f.memcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

// Elem are the element types the typed copies accept.
type Elem interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// ToDevice copies src to dst (blocking).
func ToDevice[T Elem](c *Context, dst DevicePtr, src []T) error {
	if len(src) == 0 {
		return nil
	}
	err := c.CopyHtoD(dst, unsafe.Pointer(unsafe.SliceData(src)), int64(len(src))*int64(unsafe.Sizeof(src[0])))
	runtime.KeepAlive(src)
	return err
}

// FromDevice copies len(dst) elements from src into dst (blocking).
func FromDevice[T Elem](c *Context, dst []T, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	err := c.CopyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), src, int64(len(dst))*int64(unsafe.Sizeof(dst[0])))
	runtime.KeepAlive(dst)
	return err
}
