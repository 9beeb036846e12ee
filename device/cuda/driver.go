package cuda

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/cohortml/cohort/device/internal/libfind"
)

// Spec is how the driver library is looked for: COHORT_CUDA_LIB_DIR, then
// the system loader.
var Spec = libfind.Spec{What: "libcuda.so.1", Sonames: []string{"libcuda.so.1", "libcuda.so"}, Driver: true}

// Driver is the loaded driver library (libcuda.so.1) with its functions
// resolved. It is safe for concurrent use.
type Driver struct {
	Path    string // the file loaded (resolved from the process's mappings when found by soname)
	Version int    // cuDriverGetVersion: 12020 is CUDA 12.2

	f funcs
}

// funcs are the driver entry points, by address.
type funcs struct {
	getErrorName       uintptr `sym:"cuGetErrorName"`
	getErrorString     uintptr `sym:"cuGetErrorString"`
	init               uintptr `sym:"cuInit"`
	driverGetVersion   uintptr `sym:"cuDriverGetVersion"`
	deviceGetCount     uintptr `sym:"cuDeviceGetCount"`
	deviceGet          uintptr `sym:"cuDeviceGet"`
	deviceGetName      uintptr `sym:"cuDeviceGetName"`
	deviceGetAttribute uintptr `sym:"cuDeviceGetAttribute"`
	deviceTotalMem     uintptr `sym:"cuDeviceTotalMem_v2"`
	primaryCtxRetain   uintptr `sym:"cuDevicePrimaryCtxRetain"`
	primaryCtxRelease  uintptr `sym:"cuDevicePrimaryCtxRelease_v2"`
	ctxSetCurrent      uintptr `sym:"cuCtxSetCurrent"`
	ctxSynchronize     uintptr `sym:"cuCtxSynchronize"`
	memAlloc           uintptr `sym:"cuMemAlloc_v2"`
	memFree            uintptr `sym:"cuMemFree_v2"`
	memGetInfo         uintptr `sym:"cuMemGetInfo_v2"`
	memAllocHost       uintptr `sym:"cuMemAllocHost_v2"`
	memFreeHost        uintptr `sym:"cuMemFreeHost"`
	memsetD8           uintptr `sym:"cuMemsetD8_v2"`
	memsetD32          uintptr `sym:"cuMemsetD32_v2"`
	memsetD8Async      uintptr `sym:"cuMemsetD8Async"`
	memsetD32Async     uintptr `sym:"cuMemsetD32Async"`
	memcpyHtoD         uintptr `sym:"cuMemcpyHtoD_v2"`
	memcpyDtoH         uintptr `sym:"cuMemcpyDtoH_v2"`
	memcpyDtoD         uintptr `sym:"cuMemcpyDtoD_v2"`
	memcpyHtoDAsync    uintptr `sym:"cuMemcpyHtoDAsync_v2"`
	memcpyDtoHAsync    uintptr `sym:"cuMemcpyDtoHAsync_v2"`
	memcpyDtoDAsync    uintptr `sym:"cuMemcpyDtoDAsync_v2"`
	streamCreate       uintptr `sym:"cuStreamCreate"`
	streamDestroy      uintptr `sym:"cuStreamDestroy_v2"`
	streamSynchronize  uintptr `sym:"cuStreamSynchronize"`
	streamQuery        uintptr `sym:"cuStreamQuery"`
	streamWaitEvent    uintptr `sym:"cuStreamWaitEvent"`
	eventCreate        uintptr `sym:"cuEventCreate"`
	eventDestroy       uintptr `sym:"cuEventDestroy_v2"`
	eventRecord        uintptr `sym:"cuEventRecord"`
	eventSynchronize   uintptr `sym:"cuEventSynchronize"`
	eventQuery         uintptr `sym:"cuEventQuery"`
	eventElapsedTime   uintptr `sym:"cuEventElapsedTime"`
	moduleLoadDataEx   uintptr `sym:"cuModuleLoadDataEx"`
	moduleUnload       uintptr `sym:"cuModuleUnload"`
	moduleGetFunction  uintptr `sym:"cuModuleGetFunction"`
	funcSetAttribute   uintptr `sym:"cuFuncSetAttribute"`
	funcGetAttribute   uintptr `sym:"cuFuncGetAttribute"`
	launchKernel       uintptr `sym:"cuLaunchKernel"`
}

// Load opens the driver library, with the environment read by os.Getenv,
// resolves its functions and reads its version. It does not call cuInit.
func Load() (*Driver, error) { return LoadEnv(libfind.FromEnv(os.Getenv)) }

// LoadEnv is Load with the environment given.
func LoadEnv(env libfind.Env) (*Driver, error) {
	d := &Driver{}
	var err error
	if _, d.Path, err = env.Load("cuda", Spec, ErrNotFound, libfind.Table(&d.f)); err != nil {
		return nil, err
	}
	var v int32
	if err := d.call("cuDriverGetVersion", d.f.driverGetVersion, uintptr(unsafe.Pointer(&v))); err != nil {
		return nil, err
	}
	d.Version = int(v)
	return d, nil
}

// call runs a driver function that needs no context and turns its CUresult
// into a *Error.
// Pointers converted to uintptr in its arguments are moved to the heap and
// kept alive for the call (as for purego.SyscallN), so a stack copy cannot
// move what the library reads.
//
//go:uintptrescapes
func (d *Driver) call(name string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if r != 0 {
		return d.err(name, r)
	}
	return nil
}

func (d *Driver) err(call string, r uintptr) *Error {
	e := &Error{Call: call, Code: int(r)}
	var p uintptr
	if d.f.getErrorName != 0 {
		if rr, _, _ := purego.SyscallN(d.f.getErrorName, r, uintptr(unsafe.Pointer(&p))); rr == 0 {
			e.Name = libfind.GoString(p)
		}
	}
	if e.Name == "" {
		e.Name = errorNames[e.Code]
		if e.Name == "" {
			e.Name = "CUDA_ERROR"
		}
	}
	p = 0
	if d.f.getErrorString != 0 {
		if rr, _, _ := purego.SyscallN(d.f.getErrorString, r, uintptr(unsafe.Pointer(&p))); rr == 0 {
			e.Msg = libfind.GoString(p)
		}
	}
	if e.Msg == "" {
		e.Msg = "unknown error"
	}
	return e
}

// Init calls cuInit(0). Without a device the error is one line saying
// what was found and that there is no device; it wraps ErrNoDevice.
func (d *Driver) Init() error {
	if err := d.call("cuInit", d.f.init, 0); err != nil {
		if err.(*Error).Code == ErrorNoDeviceCode {
			return fmt.Errorf("%w: driver library %s (CUDA %s) loaded, but cuInit reports %s: %s", ErrNoDevice, d.Path, VersionString(d.Version), err.(*Error).Name, err.(*Error).Msg)
		}
		return fmt.Errorf("cuda: driver library %s (CUDA %s): %w", d.Path, VersionString(d.Version), err)
	}
	return nil
}

// DeviceCount is cuDeviceGetCount (after Init).
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	err := d.call("cuDeviceGetCount", d.f.deviceGetCount, uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

// Device attributes (CUdevice_attribute).
const (
	AttrMaxThreadsPerBlock           = 1
	AttrWarpSize                     = 10
	AttrClockRateKHz                 = 13
	AttrMultiprocessorCount          = 16
	AttrMemoryClockRateKHz           = 36
	AttrGlobalMemoryBusWidth         = 37
	AttrL2CacheSize                  = 38
	AttrComputeCapabilityMajor       = 75
	AttrComputeCapabilityMinor       = 76
	AttrMaxSharedMemoryPerBlockOptin = 97
)

// DeviceInfo describes one device.
type DeviceInfo struct {
	Ordinal                     int
	Name                        string
	Major, Minor                int // compute capability
	TotalBytes                  int64
	SMs                         int
	MaxSharedBytesPerBlockOptin int
}

// Arch is the virtual architecture NVRTC compiles for: "compute_90".
func (i DeviceInfo) Arch() string { return fmt.Sprintf("compute_%d%d", i.Major, i.Minor) }

func (i DeviceInfo) String() string {
	return fmt.Sprintf("%s (sm_%d%d, %d SMs, %.1f GiB)", i.Name, i.Major, i.Minor, i.SMs, float64(i.TotalBytes)/(1<<30))
}

// Attribute is cuDeviceGetAttribute.
func (d *Driver) Attribute(ordinal, attr int) (int, error) {
	dev, err := d.device(ordinal)
	if err != nil {
		return 0, err
	}
	var v int32
	err = d.call("cuDeviceGetAttribute", d.f.deviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(dev))
	return int(v), err
}

func (d *Driver) device(ordinal int) (int32, error) {
	var dev int32
	err := d.call("cuDeviceGet", d.f.deviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal))
	return dev, err
}

// Info reads a device's name, compute capability, memory and SM count.
func (d *Driver) Info(ordinal int) (DeviceInfo, error) {
	dev, err := d.device(ordinal)
	if err != nil {
		return DeviceInfo{}, err
	}
	info := DeviceInfo{Ordinal: ordinal}
	name := make([]byte, 256)
	if err := d.call("cuDeviceGetName", d.f.deviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(dev)); err != nil {
		return info, err
	}
	info.Name = string(name[:clen(name)])
	var total uintptr
	if err := d.call("cuDeviceTotalMem_v2", d.f.deviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(dev)); err != nil {
		return info, err
	}
	info.TotalBytes = int64(total)
	for _, a := range []struct {
		attr int
		at   *int
	}{
		{AttrComputeCapabilityMajor, &info.Major}, {AttrComputeCapabilityMinor, &info.Minor},
		{AttrMultiprocessorCount, &info.SMs}, {AttrMaxSharedMemoryPerBlockOptin, &info.MaxSharedBytesPerBlockOptin},
	} {
		var v int32
		if err := d.call("cuDeviceGetAttribute", d.f.deviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), uintptr(dev)); err != nil {
			return info, err
		}
		*a.at = int(v)
	}
	return info, nil
}

func clen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}

// Open loads the driver, initialises it and retains the primary context of
// device ordinal: the usual way in. Every failure is one line; without a
// device it wraps ErrNoDevice and names the driver found.
func Open(ordinal int) (*Context, error) {
	d, err := Load()
	if err != nil {
		return nil, err
	}
	if err := d.Init(); err != nil {
		return nil, err
	}
	return d.Primary(ordinal)
}

// Primary retains device ordinal's primary context (the one the CUDA
// runtime, and so PyTorch, shares). Close releases it.
func (d *Driver) Primary(ordinal int) (*Context, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: device %d does not exist (%d devices)", ordinal, n)
	}
	info, err := d.Info(ordinal)
	if err != nil {
		return nil, err
	}
	dev, err := d.device(ordinal)
	if err != nil {
		return nil, err
	}
	c := &Context{d: d, dev: dev, Device: info}
	if err := d.call("cuDevicePrimaryCtxRetain", d.f.primaryCtxRetain, uintptr(unsafe.Pointer(&c.ctx)), uintptr(dev)); err != nil {
		return nil, err
	}
	return c, nil
}

// Context is a retained primary context of one device. Its methods make
// it current on the calling OS thread for the duration of each call (the
// goroutine is locked to its thread meanwhile), so a Context may be used
// from any goroutine; calls are safe for concurrent use as the driver API
// is. Ordering between calls is the streams': the caller orders work by
// the streams and events it passes.
type Context struct {
	Device DeviceInfo

	d   *Driver
	dev int32
	ctx uintptr
}

// Driver returns the driver the context came from.
func (c *Context) Driver() *Driver { return c.d }

// call makes the context current on this thread and runs fn.
// Pointers converted to uintptr in its arguments are moved to the heap and
// kept alive for the call (as for purego.SyscallN), so a stack copy cannot
// move what the library reads.
//
//go:uintptrescapes
func (c *Context) call(name string, fn uintptr, args ...uintptr) error {
	runtime.LockOSThread()
	r, _, _ := purego.SyscallN(c.d.f.ctxSetCurrent, c.ctx)
	if r == 0 {
		r, _, _ = purego.SyscallN(fn, args...)
	} else {
		name = "cuCtxSetCurrent"
	}
	runtime.UnlockOSThread()
	if r != 0 {
		return c.d.err(name, r)
	}
	return nil
}

// Close releases the primary context; it blocks until the device is idle
// when this was the last reference. Using c afterwards is an error.
func (c *Context) Close() error {
	if c.ctx == 0 {
		return nil
	}
	c.ctx = 0
	return c.d.call("cuDevicePrimaryCtxRelease_v2", c.d.f.primaryCtxRelease, uintptr(c.dev))
}

// Synchronize blocks until every stream of the context is idle.
func (c *Context) Synchronize() error { return c.call("cuCtxSynchronize", c.d.f.ctxSynchronize) }

// Do runs fn with the context current on the calling OS thread (the
// goroutine stays on the thread until fn returns): for libraries such as
// cuBLAS that use the current context.
func (c *Context) Do(fn func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r, _, _ := purego.SyscallN(c.d.f.ctxSetCurrent, c.ctx); r != 0 {
		return c.d.err("cuCtxSetCurrent", r)
	}
	fn()
	return nil
}
