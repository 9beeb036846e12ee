package cudatensor

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cohortml/cohort/device/alloc"
	"github.com/cohortml/cohort/device/cublas"
	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/kernels"
	"github.com/cohortml/cohort/device/nvrtc"
	"github.com/cohortml/cohort/tensor"
)

// Kind is the device kind the package registers with tensor.
const Kind = "cuda"

// state is what one device needs: its primary context, the one compute
// stream every op of the device is queued on (so ops run in program
// order), the caching allocator, a cuBLAS handle on that stream with TF32
// off, and the kernel modules, compiled and loaded on first use.
type state struct {
	dev    tensor.Device
	ctx    *cuda.Context
	stream cuda.Stream
	mem    *alloc.Allocator
	arch   string // compute_XY, the device's compute capability

	blasMu sync.Mutex // a cuBLAS handle is not safe for concurrent use
	blas   *cublas.Handle

	modMu   sync.Mutex
	modules map[string]*cuda.Module // by family
	funcs   map[string]launcher     // by kernel name

	// dry, when set, replaces the device: launches and GEMMs are checked
	// and recorded instead of run, buffers get made-up addresses. The
	// tests run every op this way without a GPU.
	dry *dryRun
}

// dryRun records what the ops would have queued.
type dryRun struct {
	mu       sync.Mutex
	next     cuda.DevicePtr
	launches []launchRecord
	gemms    []cublas.Gemm
}

// launchRecord is one kernel launch as packed.
type launchRecord struct {
	op, kernel string
	geometry   kernels.Geometry
	args       int
}

type launcher struct {
	k kernels.Kernel
	f cuda.Function
}

// opened holds each device's state once Init (or the first op) opened it.
// Like tensor's backend registry this is package-level state: a device is
// a process-wide resource (its primary context is shared with every other
// user in the process), opened at most once.
var opened struct {
	sync.Mutex
	m map[int]*opening
}

type opening struct {
	once sync.Once
	st   *state
	err  error
}

// Init opens dev (CUDA device dev.Index()): loads the driver, NVRTC and
// cuBLAS, retains the device's primary context and makes its stream,
// allocator and cuBLAS handle. It is idempotent; a failure is remembered
// and returned again. The error is one line naming what is missing and
// where it was looked for (no driver, no device, NVRTC or cuBLAS not
// found). Programs call it right after parsing a -device flag so that a
// machine without a GPU fails before any data is loaded.
func Init(dev tensor.Device) error {
	_, err := stateOf(dev)
	return err
}

func stateOf(dev tensor.Device) (*state, error) {
	if dev.Kind() != Kind {
		return nil, fmt.Errorf("cudatensor: device %v is not a CUDA device", dev)
	}
	opened.Lock()
	if opened.m == nil {
		opened.m = map[int]*opening{}
	}
	o := opened.m[dev.Index()]
	if o == nil {
		o = &opening{}
		opened.m[dev.Index()] = o
	}
	opened.Unlock()
	o.once.Do(func() { o.st, o.err = open(dev) })
	return o.st, o.err
}

// must returns dev's state, panicking with Init's error: the tensor
// Backend interface has no error returns, and a tensor moved to a device
// that cannot be opened is a program that cannot go on.
func must(dev tensor.Device) *state {
	st, err := stateOf(dev)
	if err != nil {
		panic(err.Error())
	}
	return st
}

func open(dev tensor.Device) (*state, error) {
	ctx, err := cuda.Open(dev.Index())
	if err != nil {
		return nil, fmt.Errorf("cudatensor: %v: %w", dev, err)
	}
	if _, err := nvrtc.Default(); err != nil {
		return nil, fmt.Errorf("cudatensor: %v: kernels need NVRTC: %w", dev, err)
	}
	lib, err := cublas.Load()
	if err != nil {
		return nil, fmt.Errorf("cudatensor: %v: GEMMs need cuBLAS: %w", dev, err)
	}
	st := &state{dev: dev, ctx: ctx, arch: ctx.Device.Arch(), modules: map[string]*cuda.Module{}, funcs: map[string]launcher{}}
	if st.stream, err = ctx.NewStream(true); err != nil {
		return nil, fmt.Errorf("cudatensor: %v: %w", dev, err)
	}
	if st.blas, err = lib.Create(ctx, cublas.Options{TF32: false}); err != nil {
		return nil, fmt.Errorf("cudatensor: %v: %w", dev, err)
	}
	if err := st.blas.SetStream(st.stream); err != nil {
		return nil, fmt.Errorf("cudatensor: %v: %w", dev, err)
	}
	st.mem = alloc.New(alloc.CUDA(ctx))
	return st, nil
}

// Stats returns dev's allocator statistics (allocated, reserved, peak).
func Stats(dev tensor.Device) (alloc.Stats, error) {
	st, err := stateOf(dev)
	if err != nil {
		return alloc.Stats{}, err
	}
	return st.mem.Stats(), nil
}

// ResetPeaks restarts dev's peak statistics from the current figures.
func ResetPeaks(dev tensor.Device) error {
	st, err := stateOf(dev)
	if err != nil {
		return err
	}
	st.mem.ResetPeaks()
	return nil
}

// Synchronize blocks until every op queued on dev has run, returning the
// first asynchronous fault (a kernel's) if there was one.
func Synchronize(dev tensor.Device) error {
	st, err := stateOf(dev)
	if err != nil {
		return err
	}
	return st.ctx.StreamSync(st.stream)
}

// function returns kernel name, compiling and loading its family's module
// for the device's architecture on first use (NVRTC caches the PTX on
// disk, keyed by source, arch and NVRTC version).
func (s *state) function(op, name string) launcher {
	if s.dry != nil {
		k, ok := lookup(name)
		if !ok {
			panic(fmt.Sprintf("cudatensor: %s on %v: kernel %s is not in the kernel table", op, s.dev, name))
		}
		return launcher{k: k}
	}
	s.modMu.Lock()
	defer s.modMu.Unlock()
	if l, ok := s.funcs[name]; ok {
		return l
	}
	k, ok := lookup(name)
	if !ok {
		panic(fmt.Sprintf("cudatensor: %s on %v: kernel %s is not in the kernel table", op, s.dev, name))
	}
	m := s.modules[k.Family]
	if m == nil {
		src, err := source(k.Family)
		if err != nil {
			panic(fmt.Sprintf("cudatensor: %s on %v: %v", op, s.dev, err))
		}
		ptx, err := nvrtc.Compile(src, k.Family+".cu", nvrtc.Options{Arch: s.arch})
		if err != nil {
			panic(fmt.Sprintf("cudatensor: %s on %v: %v", op, s.dev, err))
		}
		if err := cuda.CheckPTX(ptx.PTX, s.ctx.Driver().Version); err != nil {
			panic(fmt.Sprintf("cudatensor: %s on %v: %v", op, s.dev, err))
		}
		if m, err = s.ctx.LoadModule(ptx.PTX); err != nil {
			panic(fmt.Sprintf("cudatensor: %s on %v: family %s: %v", op, s.dev, k.Family, err))
		}
		s.modules[k.Family] = m
	}
	f, err := m.Function(name)
	if err != nil {
		panic(fmt.Sprintf("cudatensor: %s on %v: %v", op, s.dev, err))
	}
	l := launcher{k, f}
	s.funcs[name] = l
	return l
}

// launch queues kernel name on the device's stream with the geometry the
// kernel table gives for p, after checking args against the table's
// parameter list. Failures panic naming the op and the device.
func (s *state) launch(op, name string, p kernels.Problem, args ...arg) {
	l := s.function(op, name)
	g, err := l.k.Launch(p)
	if err != nil {
		panic(fmt.Sprintf("cudatensor: %s on %v: %v", op, s.dev, err))
	}
	if g.Grid[0]*g.Grid[1]*g.Grid[2] == 0 {
		return // nothing to do
	}
	a, err := pack(l.k, args)
	if err != nil {
		panic(fmt.Sprintf("cudatensor: %s on %v: %v", op, s.dev, err))
	}
	if s.dry != nil {
		s.dry.mu.Lock()
		s.dry.launches = append(s.dry.launches, launchRecord{op, name, g, a.Len()})
		s.dry.mu.Unlock()
		return
	}
	if g.SharedBytes > 48<<10 {
		if err := s.ctx.SetMaxDynamicShared(l.f, g.SharedBytes); err != nil {
			panic(fmt.Sprintf("cudatensor: %s on %v: %v", op, s.dev, err))
		}
	}
	err = s.ctx.Launch(l.f, cuda.Dim3{X: g.Grid[0], Y: g.Grid[1], Z: g.Grid[2]}, cuda.Dim3{X: g.Block[0], Y: g.Block[1], Z: g.Block[2]}, g.SharedBytes, s.stream, a)
	if err != nil {
		panic(fmt.Sprintf("cudatensor: %s on %v: %v", op, s.dev, err))
	}
}

// gemm queues an fp32 cuBLAS GEMM (TF32 off) on the device's stream.
func (s *state) gemm(op string, g cublas.Gemm) {
	if s.dry != nil {
		if g.M <= 0 || g.N <= 0 || g.K <= 0 || g.LDA < 1 || g.LDB < 1 || g.LDC < g.N {
			panic(fmt.Sprintf("cudatensor: %s on %v: bad gemm %+v", op, s.dev, g))
		}
		s.dry.mu.Lock()
		s.dry.gemms = append(s.dry.gemms, g)
		s.dry.mu.Unlock()
		return
	}
	s.blasMu.Lock()
	err := s.blas.Sgemm(g)
	s.blasMu.Unlock()
	if err != nil {
		panic(fmt.Sprintf("cudatensor: %s on %v: %v", op, s.dev, err))
	}
}

func (s *state) check(op string, err error) {
	if err != nil {
		panic(fmt.Sprintf("cudatensor: %s on %v: %v", op, s.dev, err))
	}
}

// buffer is device memory from the allocator. A finalizer-style cleanup
// returns the block when the last tensor viewing it is collected; the
// allocator reuses it only for work queued later on the same stream, so
// kernels still in flight keep their memory.
type buffer struct {
	st      *state
	block   *alloc.Block // nil in a dry run
	base    cuda.DevicePtr
	n       int
	cleanup runtime.Cleanup
	freed   atomic.Bool
}

// release returns the block to the allocator now (Backend.Release), once.
func (b *buffer) release() {
	if b.block == nil || b.freed.Swap(true) {
		return
	}
	b.cleanup.Stop()
	b.st.mem.Free(b.block)
}

func (b *buffer) Device() tensor.Device { return b.st.dev }
func (b *buffer) DType() tensor.DType   { return tensor.Float32 }
func (b *buffer) Len() int              { return b.n }

// DevicePtr is the device address of element off: what a collective
// backend on device memory (NCCL) hands the library.
func (b *buffer) DevicePtr(off int) uintptr { return uintptr(b.at(off)) }

// ComputeStream is the stream every op writing the buffer is queued on:
// a collective on it must be ordered after that stream's work.
func (b *buffer) ComputeStream() uintptr { return uintptr(b.st.stream) }

// at is the address of element off.
func (b *buffer) at(off int) cuda.DevicePtr { return b.base + cuda.DevicePtr(4*off) }

// newBuffer allocates n zeroed float32 elements on s.
func (s *state) newBuffer(op string, n int) *buffer {
	if s.dry != nil {
		s.dry.mu.Lock()
		defer s.dry.mu.Unlock()
		s.dry.next += 256 + cuda.DevicePtr(alloc.RoundSize(int64(4*n)))
		return &buffer{st: s, base: s.dry.next, n: n}
	}
	blk, err := s.mem.Alloc(int64(4*n), alloc.Stream(s.stream))
	if err != nil {
		panic(fmt.Sprintf("cudatensor: %s: %d float32 elements on %v: %v", op, n, s.dev, err))
	}
	b := &buffer{st: s, block: blk, base: cuda.DevicePtr(blk.Ptr()), n: n}
	if n > 0 {
		s.check(op, s.ctx.Memset32Async(b.at(0), 0, int64(n), s.stream))
	}
	mem := s.mem
	b.cleanup = runtime.AddCleanup(b, func(blk *alloc.Block) { mem.Free(blk) }, blk)
	return b
}

// scratch is a contiguous device tensor for an op's temporary values.
func (s *state) scratch(op string, shape ...int) *tensor.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	b := s.newBuffer(op, n)
	strides := make([]int, len(shape))
	st := 1
	for i := len(shape) - 1; i >= 0; i-- {
		strides[i] = st
		st *= shape[i]
	}
	return tensor.FromBuffer(b, 0, shape, strides)
}

// upload copies host values to a fresh device buffer of raw 8-byte or
// 4-byte words (indices for the gather kernels), freed with the buffer.
func (s *state) uploadI64(op string, v []int64) *buffer {
	b := s.newBuffer(op, 2*max(len(v), 1))
	if len(v) > 0 {
		s.htod(op, b.at(0), unsafePtr(v), int64(8*len(v)))
	}
	return b
}

func (s *state) uploadI32(op string, v []int32) *buffer {
	b := s.newBuffer(op, max(len(v), 1))
	if len(v) > 0 {
		s.htod(op, b.at(0), unsafePtr(v), int64(4*len(v)))
	}
	return b
}

// htod copies n bytes from the host and waits: src belongs to the caller
// again when it returns.
func (s *state) htod(op string, dst cuda.DevicePtr, src unsafe.Pointer, n int64) {
	if s.dry != nil {
		return
	}
	s.check(op, s.ctx.CopyHtoDAsync(dst, src, n, s.stream))
	s.check(op, s.ctx.StreamSync(s.stream))
}

// dtoh copies n bytes to the host after the work queued before it.
func (s *state) dtoh(op string, dst unsafe.Pointer, src cuda.DevicePtr, n int64) {
	if s.dry != nil {
		return
	}
	s.check(op, s.ctx.CopyDtoHAsync(dst, src, n, s.stream))
	s.check(op, s.ctx.StreamSync(s.stream))
}

// dtod queues a device-to-device copy of n bytes.
func (s *state) dtod(op string, dst, src cuda.DevicePtr, n int64) {
	if s.dry != nil {
		s.dry.mu.Lock()
		s.dry.launches = append(s.dry.launches, launchRecord{op: op, kernel: "cuMemcpyDtoDAsync"})
		s.dry.mu.Unlock()
		return
	}
	s.check(op, s.ctx.CopyDtoDAsync(dst, src, n, s.stream))
}

func float32bits(v float32) uint32 { return math.Float32bits(v) }

// Open parses a program's -device flag ("" is the CPU) and, for a CUDA
// device, opens it, so that a machine without one fails here with one
// line, before the program loads any data. "cuda" without an index is the
// worker's own GPU under a launcher: LOCAL_RANK's among the visible ones
// (cuda.LocalOrdinal; CUDA_VISIBLE_DEVICES applies), cuda:0 without a
// LOCAL_RANK; "cuda:N" is device N whatever the launcher says.
func Open(flag string) (tensor.Device, error) {
	return openWith(flag, os.Getenv, cuda.Visible, Init)
}

// openWith is Open with the environment, the count of visible GPUs and
// the opening of a device injected.
func openWith(flag string, getenv func(string) string, visible func() (int, error), initDev func(tensor.Device) error) (tensor.Device, error) {
	if flag == "" {
		return tensor.CPU, nil
	}
	dev, err := tensor.ParseDevice(flag)
	if err != nil {
		return dev, err
	}
	if dev.Kind() == Kind && flag == Kind && getenv("LOCAL_RANK") != "" {
		n, err := visible()
		if err != nil {
			return dev, err
		}
		i, err := cuda.LocalOrdinal(getenv, n)
		if err != nil {
			return dev, fmt.Errorf("cudatensor: -device %s: %w", flag, err)
		}
		dev = tensor.CUDA(i)
	}
	if dev.Kind() == Kind {
		if err := initDev(dev); err != nil {
			return dev, err
		}
	}
	return dev, nil
}
