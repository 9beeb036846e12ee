package nvrtc

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/cohortml/cohort/device/internal/libfind"
)

// ErrNotFound is wrapped by the error of a library that could not be found.
var ErrNotFound = errors.New("nvrtc: library not found")

// Spec is how the library is looked for.
var Spec = libfind.Spec{
	What:    "libnvrtc",
	Sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"},
	Wheel:   "nvidia/cuda_nvrtc/lib",
}

// Options controls one compile. The zero value compiles for compute_80
// with the default cache.
type Options struct {
	// Arch is the architecture: a virtual one, "compute_80" (A100) or
	// "compute_90" (H100), gives PTX, which the driver JIT-compiles and
	// which needs a driver at least as new as NVRTC; a real one, "sm_90",
	// gives a CUBIN for exactly that GPU, which any driver of the same
	// CUDA major version loads. "" means compute_80.
	Arch string
	// Flags are further NVRTC options ("-use_fast_math", "-DBLOCK=256",
	// "-lineinfo"). --gpu-architecture is added from Arch; do not pass it.
	Flags []string
	// Headers maps include names to their source, for #include "name".
	Headers map[string]string
	// NoCache skips the disk cache (neither read nor written).
	NoCache bool
	// CacheDir overrides the cache directory; "" means the default of the
	// package comment.
	CacheDir string
}

// PTX is the result of a compile.
type PTX struct {
	PTX      string // the PTX text (for a compute_XX arch), NUL-free
	CUBIN    []byte // the device code (for an sm_XX arch), an ELF image
	Arch     string // the arch compiled for
	Log      string // NVRTC's log (warnings), "" if none
	Version  string // the NVRTC version that compiled it, "11.8"
	Cached   bool   // true when read from the disk cache
	CacheErr error  // a cache read or write that failed (the compile did not)
}

// CompileError is a source that NVRTC refused.
type CompileError struct {
	Name string // the program name given to Compile
	Arch string
	Code int    // the nvrtcResult
	Msg  string // nvrtcGetErrorString
	Log  string // NVRTC's log, with file:line and the message
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("nvrtc: compile %s for %s: %s:\n%s", e.Name, e.Arch, e.Msg, strings.TrimRight(e.Log, "\n"))
}

// Lib is a loaded NVRTC library.
type Lib struct {
	Path         string // what dlopen opened
	Major, Minor int    // nvrtcVersion
	env          libfind.Env

	mu                                       sync.Mutex // serialises compiles
	version, create, compile, destroy        uintptr
	ptxSize, getPTX, logSize, getLog, errStr uintptr
	cubinSize, getCUBIN                      uintptr // 0 in NVRTC before 11.1
}

// Load finds and opens NVRTC as the package comment describes, with the
// environment read by os.Getenv.
func Load() (*Lib, error) { return LoadEnv(libfind.FromEnv(os.Getenv)) }

// LoadEnv is Load with the environment given.
func LoadEnv(env libfind.Env) (*Lib, error) {
	h, path, err := env.Open("nvrtc", Spec, ErrNotFound)
	if err != nil {
		return nil, err
	}
	l := &Lib{Path: libfind.Resolve(path), env: env}
	if err := libfind.Symbols("nvrtc", path, h, map[string]*uintptr{
		"nvrtcVersion":           &l.version,
		"nvrtcCreateProgram":     &l.create,
		"nvrtcCompileProgram":    &l.compile,
		"nvrtcDestroyProgram":    &l.destroy,
		"nvrtcGetPTXSize":        &l.ptxSize,
		"nvrtcGetPTX":            &l.getPTX,
		"nvrtcGetProgramLogSize": &l.logSize,
		"nvrtcGetProgramLog":     &l.getLog,
		"nvrtcGetErrorString":    &l.errStr,
	}); err != nil {
		return nil, err
	}
	if p, err := purego.Dlsym(h, "nvrtcGetCUBINSize"); err == nil {
		l.cubinSize = p
	}
	if p, err := purego.Dlsym(h, "nvrtcGetCUBIN"); err == nil {
		l.getCUBIN = p
	}
	var major, minor int32
	if r, _, _ := purego.SyscallN(l.version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor))); r != 0 {
		return nil, fmt.Errorf("nvrtc: %s: nvrtcVersion: %s", path, l.errString(r))
	}
	l.Major, l.Minor = int(major), int(minor)
	return l, nil
}

// VersionString is "major.minor".
func (l *Lib) VersionString() string { return fmt.Sprintf("%d.%d", l.Major, l.Minor) }

var (
	defaultOnce sync.Once
	defaultLib  *Lib
	defaultErr  error
)

// Default returns the library behind [Compile], loading it on first use;
// a failure to load is remembered for the life of the process.
func Default() (*Lib, error) {
	defaultOnce.Do(func() { defaultLib, defaultErr = Load() })
	return defaultLib, defaultErr
}

// Compile compiles src (named name in messages, "attention.cu") with the
// default library. See [Lib.Compile].
func Compile(src, name string, opts Options) (*PTX, error) {
	l, err := Default()
	if err != nil {
		return nil, err
	}
	return l.Compile(src, name, opts)
}

var archRE = regexp.MustCompile(`^(compute|sm)_[0-9]{2,3}[a-z]?$`)

// Compile compiles src to PTX for opts.Arch, reading and filling the disk
// cache. A source that does not compile gives a *CompileError with the log.
func (l *Lib) Compile(src, name string, opts Options) (*PTX, error) {
	arch := opts.Arch
	if arch == "" {
		arch = "compute_80"
	}
	if !archRE.MatchString(arch) {
		return nil, fmt.Errorf("nvrtc: compile %s: arch %q is not an architecture like compute_80 or sm_90", name, arch)
	}
	cubin := strings.HasPrefix(arch, "sm_")
	if cubin && l.getCUBIN == 0 {
		return nil, fmt.Errorf("nvrtc: compile %s: NVRTC %s cannot make a CUBIN (arch %s); use a compute_XX arch", name, l.VersionString(), arch)
	}
	for _, f := range opts.Flags {
		if strings.HasPrefix(f, "--gpu-architecture") || strings.HasPrefix(f, "-arch") {
			return nil, fmt.Errorf("nvrtc: compile %s: flag %q: set Options.Arch instead", name, f)
		}
	}
	args := append([]string{"--gpu-architecture=" + arch}, opts.Flags...)
	key := cacheKey(src, args, opts.Headers, arch, l.VersionString())
	var c *cache
	var cacheErr error
	if !opts.NoCache {
		c, cacheErr = newCache(opts.CacheDir, l.env)
	}
	if c != nil {
		ptx, ok, err := c.get(key)
		if ok {
			return result(ptx, cubin, &PTX{Arch: arch, Version: l.VersionString(), Cached: true}), nil
		}
		cacheErr = err // a corrupt entry: compile again and overwrite it
	}
	ptx, log, err := l.compileNoCache(src, name, arch, args, opts.Headers, cubin)
	if err != nil {
		return nil, err
	}
	out := result(ptx, cubin, &PTX{Arch: arch, Log: log, Version: l.VersionString(), CacheErr: cacheErr})
	if c != nil {
		if err := c.put(key, ptx); err != nil {
			out.CacheErr = err
		}
	}
	return out, nil
}

func cacheKey(src string, args []string, headers map[string]string, arch, version string) string {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s;", len(s), s) }
	field("cohort-ptx-v1")
	field(src)
	field(arch)
	field(version)
	for _, a := range args {
		field(a)
	}
	names := make([]string, 0, len(headers))
	for n := range headers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		field(n)
		field(headers[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// cstr is a NUL-terminated copy of s.
func cstr(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// result fills p's code from the compiled (or cached) bytes.
func result(code string, cubin bool, p *PTX) *PTX {
	if cubin {
		p.CUBIN = []byte(code)
	} else {
		p.PTX = code
	}
	return p
}

// compileNoCache returns the PTX, or with cubin the CUBIN's bytes.
func (l *Lib) compileNoCache(src, name, arch string, args []string, headers map[string]string, cubin bool) (ptx, log string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := []any{} // everything whose address crosses into C
	ptrs := func(ss []string) []uintptr {
		p := make([]uintptr, len(ss)+1) // +1: never empty
		for i, s := range ss {
			b := cstr(s)
			keep = append(keep, b)
			p[i] = uintptr(unsafe.Pointer(b))
		}
		keep = append(keep, p)
		return p
	}
	var hnames, hsrcs []string
	for n, s := range headers {
		hnames = append(hnames, n)
		hsrcs = append(hsrcs, s)
	}
	hn, hs, argv := ptrs(hnames), ptrs(hsrcs), ptrs(args)
	csrc, cname := cstr(src), cstr(name)
	var prog uintptr
	r, _, _ := purego.SyscallN(l.create, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(csrc)), uintptr(unsafe.Pointer(cname)),
		uintptr(len(headers)), uintptr(unsafe.Pointer(&hs[0])), uintptr(unsafe.Pointer(&hn[0])))
	runtime.KeepAlive(csrc)
	runtime.KeepAlive(cname)
	runtime.KeepAlive(keep)
	if r != 0 {
		return "", "", fmt.Errorf("nvrtc: compile %s: nvrtcCreateProgram: %s", name, l.errString(r))
	}
	defer purego.SyscallN(l.destroy, uintptr(unsafe.Pointer(&prog)))
	rc, _, _ := purego.SyscallN(l.compile, prog, uintptr(len(args)), uintptr(unsafe.Pointer(&argv[0])))
	runtime.KeepAlive(keep)
	log = strings.TrimRight(l.bytes(prog, l.logSize, l.getLog), "\x00")
	if rc != 0 {
		return "", "", &CompileError{Name: name, Arch: arch, Code: int(rc), Msg: l.errString(rc), Log: log}
	}
	if cubin {
		ptx = l.bytes(prog, l.cubinSize, l.getCUBIN)
	} else {
		ptx = strings.TrimRight(l.bytes(prog, l.ptxSize, l.getPTX), "\x00")
	}
	if ptx == "" {
		return "", "", fmt.Errorf("nvrtc: compile %s: NVRTC returned no PTX", name)
	}
	return ptx, log, nil
}

// bytes reads a program's output through a size getter and a copier
// (nvrtcGetPTX, nvrtcGetCUBIN, nvrtcGetProgramLog).
func (l *Lib) bytes(prog, size, get uintptr) string {
	var n uintptr
	if r, _, _ := purego.SyscallN(size, prog, uintptr(unsafe.Pointer(&n))); r != 0 || n == 0 {
		return ""
	}
	buf := make([]byte, n)
	if r, _, _ := purego.SyscallN(get, prog, uintptr(unsafe.Pointer(&buf[0]))); r != 0 {
		return ""
	}
	return string(buf)
}

func (l *Lib) errString(r uintptr) string {
	p, _, _ := purego.SyscallN(l.errStr, r)
	if p == 0 {
		return fmt.Sprintf("nvrtc error %d", int(r))
	}
	return fmt.Sprintf("%s (%d)", libfind.GoString(p), int(r))
}
