package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"unsafe"
)

// Module is a loaded module (CUmodule).
type Module struct {
	c *Context
	h uintptr
	// Log is the JIT compiler's information log (may be empty).
	Log string
}

// Function is a kernel of a loaded module (CUfunction).
type Function struct {
	Name string
	h    uintptr
}

const (
	jitInfoLogBuffer          = 3 // CU_JIT_INFO_LOG_BUFFER
	jitInfoLogBufferSizeBytes = 4
	jitErrorLogBuffer         = 5
	jitErrorLogBufferSize     = 6
	jitLogSize                = 16 << 10
)

type jitOptions struct {
	info, errs [jitLogSize]byte
	opts       [4]int32
	vals       [4]uintptr
}

// LoadModule loads a module (cuModuleLoadDataEx) from PTX text, which the
// driver JIT-compiles for the device, or from a CUBIN (an ELF image, as
// nvrtc makes for an sm_XX arch), which it loads as is. PTX whose ISA the
// driver is too old for gives a *VersionError naming both versions,
// checked before the driver is asked; any other failure is a *Error whose
// Detail holds the JIT error log. It blocks while the driver compiles
// (milliseconds to seconds).
func (c *Context) LoadModule(ptx string) (*Module, error) {
	if !strings.HasPrefix(ptx, "\x7fELF") {
		if err := CheckPTX(ptx, c.d.Version); err != nil {
			return nil, err
		}
	}
	img := make([]byte, len(ptx)+1)
	copy(img, ptx)
	// One heap object holds the logs and the option arrays: the values
	// array carries the logs' addresses as integers, which the garbage
	// collector neither traces nor moves.
	j := new(jitOptions)
	j.opts = [4]int32{jitInfoLogBuffer, jitInfoLogBufferSizeBytes, jitErrorLogBuffer, jitErrorLogBufferSize}
	// Option values are void*: buffers by address, sizes by value (the
	// driver writes back the used sizes).
	j.vals = [4]uintptr{uintptr(unsafe.Pointer(&j.info[0])), jitLogSize, uintptr(unsafe.Pointer(&j.errs[0])), jitLogSize}
	m := &Module{c: c}
	err := c.call("cuModuleLoadDataEx", c.d.f.moduleLoadDataEx, uintptr(unsafe.Pointer(&m.h)),
		uintptr(unsafe.Pointer(&img[0])), uintptr(len(j.opts)), uintptr(unsafe.Pointer(&j.opts[0])), uintptr(unsafe.Pointer(&j.vals[0])))
	runtime.KeepAlive(img)
	runtime.KeepAlive(j)
	infoLog, errLog := j.info[:], j.errs[:]
	m.Log = strings.TrimSpace(string(infoLog[:clen(infoLog)]))
	if err != nil {
		e := err.(*Error)
		if e.Code == ErrorUnsupportedPTXVersion {
			return nil, &VersionError{PTX: PTXVersion(ptx), NeedCUDA: needCUDA(PTXVersion(ptx)), Driver: c.d.Version}
		}
		if l := strings.TrimSpace(string(errLog[:clen(errLog)])); l != "" {
			e.Detail = "JIT log:\n" + l
		}
		return nil, e
	}
	return m, nil
}

// LoadCUBIN loads a module from a CUBIN image (nvrtc's PTX.CUBIN).
func (c *Context) LoadCUBIN(img []byte) (*Module, error) {
	if !strings.HasPrefix(string(img[:min(len(img), 4)]), "\x7fELF") {
		return nil, fmt.Errorf("cuda: LoadCUBIN: the image is not an ELF file (%d bytes)", len(img))
	}
	return c.LoadModule(string(img))
}

func needCUDA(isa int) int {
	for _, v := range ptxISA {
		if v.isa >= isa {
			return v.cuda
		}
	}
	return 0
}

// Unload unloads the module; its functions must not be launched afterwards.
func (m *Module) Unload() error {
	if m.h == 0 {
		return nil
	}
	h := m.h
	m.h = 0
	return m.c.call("cuModuleUnload", m.c.d.f.moduleUnload, h)
}

// Function looks up the kernel name (the extern "C" name in the source).
func (m *Module) Function(name string) (Function, error) {
	cname := append([]byte(name), 0)
	f := Function{Name: name}
	err := m.c.call("cuModuleGetFunction", m.c.d.f.moduleGetFunction, uintptr(unsafe.Pointer(&f.h)), m.h, uintptr(unsafe.Pointer(&cname[0])))
	runtime.KeepAlive(cname)
	if err != nil {
		err.(*Error).Detail = "kernel " + name
		return Function{}, err
	}
	return f, nil
}

const (
	funcAttrMaxThreadsPerBlock    = 0 // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	funcAttrNumRegs               = 4
	funcAttrMaxDynamicSharedBytes = 8
)

// SetMaxDynamicShared allows f to be launched with up to n bytes of
// dynamic shared memory (needed above 48 KiB).
func (c *Context) SetMaxDynamicShared(f Function, n int) error {
	return c.call("cuFuncSetAttribute", c.d.f.funcSetAttribute, f.h, funcAttrMaxDynamicSharedBytes, uintptr(n))
}

// Registers is the number of registers per thread f uses.
func (c *Context) Registers(f Function) (int, error) {
	var v int32
	err := c.call("cuFuncGetAttribute", c.d.f.funcGetAttribute, uintptr(unsafe.Pointer(&v)), funcAttrNumRegs, f.h)
	return int(v), err
}

// Dim3 is a grid or block shape; zero components count as 1.
type Dim3 struct{ X, Y, Z int }

func (d Dim3) norm() (x, y, z uintptr) {
	return uintptr(max(d.X, 1)), uintptr(max(d.Y, 1)), uintptr(max(d.Z, 1))
}

// MaxArgs is the most arguments a kernel launch may take through Args.
const MaxArgs = 32

// Args packs a kernel's arguments in order. Each value is stored in an
// 8-byte slot; the driver reads as many bytes as the kernel's parameter
// has, so a slot serves any scalar of at most 8 bytes. The zero value is
// empty; Reset empties it for reuse.
type Args struct {
	vals [MaxArgs]uint64
	ptrs [MaxArgs]uintptr
	n    int
	err  error
}

func (a *Args) push(v uint64) *Args {
	if a.n == MaxArgs {
		a.err = fmt.Errorf("cuda: launch: more than %d arguments", MaxArgs)
		return a
	}
	a.vals[a.n] = v
	a.n++
	return a
}

// Ptr appends a device pointer.
func (a *Args) Ptr(p DevicePtr) *Args { return a.push(uint64(p)) }

// I32 appends an int.
func (a *Args) I32(v int32) *Args { return a.push(uint64(uint32(v))) }

// Int appends an int as a C int, recording an error if it does not fit.
func (a *Args) Int(v int) *Args {
	if v < math.MinInt32 || v > math.MaxInt32 {
		a.err = fmt.Errorf("cuda: launch: argument %d: %d does not fit a C int", a.n, v)
	}
	return a.I32(int32(v))
}

// U32 appends an unsigned int.
func (a *Args) U32(v uint32) *Args { return a.push(uint64(v)) }

// I64 appends a long long.
func (a *Args) I64(v int64) *Args { return a.push(uint64(v)) }

// U64 appends an unsigned long long or size_t.
func (a *Args) U64(v uint64) *Args { return a.push(v) }

// F32 appends a float.
func (a *Args) F32(v float32) *Args { return a.push(uint64(math.Float32bits(v))) }

// F64 appends a double.
func (a *Args) F64(v float64) *Args { return a.push(math.Float64bits(v)) }

// Len is the number of arguments.
func (a *Args) Len() int { return a.n }

// Reset empties a.
func (a *Args) Reset() { *a = Args{} }

// ErrArgs is wrapped by a launch refused for its arguments.
var ErrArgs = errors.New("cuda: bad launch arguments")

// Launch enqueues f on s with the given grid, block, dynamic shared memory
// and arguments (cuLaunchKernel). It returns when the launch is queued,
// not when the kernel has run; a fault in the kernel shows at a later
// synchronising call. The driver copies the arguments, so args may be
// reused as soon as Launch returns.
func (c *Context) Launch(f Function, grid, block Dim3, sharedBytes int, s Stream, args *Args) error {
	if args == nil {
		args = &Args{}
	}
	if args.err != nil {
		return fmt.Errorf("%w: %s: %v", ErrArgs, f.Name, args.err)
	}
	for i := range args.n {
		args.ptrs[i] = uintptr(unsafe.Pointer(&args.vals[i]))
	}
	gx, gy, gz := grid.norm()
	bx, by, bz := block.norm()
	err := c.call("cuLaunchKernel", c.d.f.launchKernel, f.h, gx, gy, gz, bx, by, bz,
		uintptr(sharedBytes), uintptr(s), uintptr(unsafe.Pointer(&args.ptrs[0])), 0)
	runtime.KeepAlive(args)
	if err != nil {
		err.(*Error).Detail = fmt.Sprintf("kernel %s grid %v block %v shared %d", f.Name, grid, block, sharedBytes)
	}
	return err
}
