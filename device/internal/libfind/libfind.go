// Package libfind finds NVIDIA's shared libraries where users have them
// and reads, in one place, the environment variables that steer the
// search and the PTX cache.
//
// The search order for a toolkit library (NVRTC, cuBLAS):
//
//  1. COHORT_CUDA_LIB_DIR (a list of directories, like PATH): when set,
//     it is the only place looked;
//  2. CUDA_HOME/lib64 and CUDA_PATH/lib64;
//  3. /usr/local/cuda/lib64, then /usr/local/cuda-*/lib64 (newest name first);
//  4. pip's nvidia-* wheels: site-packages/nvidia/cu13/lib (CUDA 13's
//     single directory) and the per-library directory of CUDA 12 wheels
//     (nvidia/cuda_nvrtc/lib, nvidia/cublas/lib), under VIRTUAL_ENV,
//     CONDA_PREFIX, ~/.local, /usr/lib, /usr/local/lib, /opt/*/.venv,
//     /opt/*/venv and /opt/conda;
//  5. the system loader (ld.so.cache, LD_LIBRARY_PATH) by soname.
//
// In each directory the sonames are tried newest first. The driver library
// (libcuda.so.1) belongs to the driver, not the toolkit: it is looked for in
// COHORT_CUDA_LIB_DIR first, then by the system loader.
//
// A library may also be named outright by a variable of its own
// (COHORT_NCCL_LIBRARY for libnccl: a path or a soname): when set, it is
// the only candidate.
//
// NCCL ships in the CUDA toolkit's directories on some systems, in pip's
// nvidia-nccl-cu12 wheel (site-packages/nvidia/nccl/lib) and in the CUDA 13
// layout (nvidia/cu13/lib, nvidia-nccl-cu13): the same search finds it.
package libfind

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Env holds the environment variables the device packages read. The zero
// value searches only the standard places.
type Env struct {
	LibDir     string // COHORT_CUDA_LIB_DIR: list of directories; when set, toolkit libraries are looked for only there
	CUDAHome   string // CUDA_HOME
	CUDAPath   string // CUDA_PATH
	VirtualEnv string // VIRTUAL_ENV
	Conda      string // CONDA_PREFIX
	Home       string // HOME
	CacheDir   string // COHORT_CACHE_DIR: root of cohort's caches (PTX under ptx/)
	// NCCLLibrary is COHORT_NCCL_LIBRARY: the NCCL library to load (a
	// path or a soname), and no other.
	NCCLLibrary string
}

// FromEnv reads Env with getenv (normally os.Getenv). It is the one place
// the device packages read the environment.
func FromEnv(getenv func(string) string) Env {
	return Env{
		LibDir:     getenv("COHORT_CUDA_LIB_DIR"),
		CUDAHome:   getenv("CUDA_HOME"),
		CUDAPath:   getenv("CUDA_PATH"),
		VirtualEnv: getenv("VIRTUAL_ENV"),
		Conda:      getenv("CONDA_PREFIX"),
		Home:       getenv("HOME"),
		CacheDir:   getenv("COHORT_CACHE_DIR"),

		NCCLLibrary: getenv("COHORT_NCCL_LIBRARY"),
	}
}

// Spec describes one library to find.
type Spec struct {
	What    string   // the name in messages: "libnvrtc"
	Sonames []string // newest first: "libnvrtc.so.13", …, "libnvrtc.so"
	Wheel   string   // the CUDA 12 wheel directory under site-packages: "nvidia/cuda_nvrtc/lib"
	Driver  bool     // the driver's library: COHORT_CUDA_LIB_DIR, then the system loader only
	// Override is the variable that names this library outright
	// ("COHORT_NCCL_LIBRARY"); when the Env has it set, it is the only
	// candidate.
	Override string
}

// Candidate is one thing to hand to dlopen: a path, or a bare soname for
// the system loader.
type Candidate struct {
	Name  string // a path, or a soname when System
	Where string // for messages: "COHORT_CUDA_LIB_DIR=/x", "system loader"
}

// Candidates lists, in order, what to try to dlopen for s. Directories
// that do not exist are left out, but are named in Looked.
func (e Env) Candidates(s Spec) (c []Candidate, looked []string) {
	if v := e.override(s.Override); v != "" {
		where := s.Override + "=" + v
		return []Candidate{{Name: v, Where: where}}, []string{where}
	}
	var dirs []struct{ dir, where string }
	add := func(dir, where string) {
		if dir == "" {
			return
		}
		dir = filepath.Clean(dir)
		for _, d := range dirs {
			if d.dir == dir {
				return
			}
		}
		dirs = append(dirs, struct{ dir, where string }{dir, where})
	}
	if e.LibDir != "" {
		for _, d := range filepath.SplitList(e.LibDir) {
			add(d, "COHORT_CUDA_LIB_DIR")
		}
	}
	system := true
	if !s.Driver {
		if e.LibDir != "" {
			system = false
		} else {
			for _, d := range e.toolkitDirs(s) {
				add(d.dir, d.where)
			}
		}
	}
	for _, d := range dirs {
		looked = append(looked, d.dir)
		if st, err := os.Stat(d.dir); err != nil || !st.IsDir() {
			continue
		}
		for _, so := range s.Sonames {
			p := filepath.Join(d.dir, so)
			if _, err := os.Stat(p); err == nil {
				c = append(c, Candidate{Name: p, Where: d.where})
			}
		}
	}
	if system {
		looked = append(looked, "system loader ("+strings.Join(s.Sonames, ", ")+")")
		for _, so := range s.Sonames {
			c = append(c, Candidate{Name: so, Where: "system loader"})
		}
	}
	return c, looked
}

// override returns the value of the variable v names, "" when unset or
// unknown.
func (e Env) override(v string) string {
	switch v {
	case "COHORT_NCCL_LIBRARY":
		return e.NCCLLibrary
	}
	return ""
}

type dirWhere struct{ dir, where string }

// toolkitDirs lists the directories of steps 2–4 of the package comment.
func (e Env) toolkitDirs(s Spec) []dirWhere {
	var out []dirWhere
	if e.CUDAHome != "" {
		out = append(out, dirWhere{filepath.Join(e.CUDAHome, "lib64"), "CUDA_HOME"})
	}
	if e.CUDAPath != "" {
		out = append(out, dirWhere{filepath.Join(e.CUDAPath, "lib64"), "CUDA_PATH"})
	}
	out = append(out, dirWhere{"/usr/local/cuda/lib64", "/usr/local/cuda"})
	cudas, _ := filepath.Glob("/usr/local/cuda-*/lib64")
	slices.Sort(cudas)
	slices.Reverse(cudas)
	for _, d := range cudas {
		out = append(out, dirWhere{d, "/usr/local/cuda-*"})
	}
	var sites []string
	pyGlob := func(prefix string) {
		if prefix == "" {
			return
		}
		for _, pkg := range []string{"site-packages", "dist-packages"} {
			m, _ := filepath.Glob(filepath.Join(prefix, "lib", "python3*", pkg))
			slices.Sort(m)
			slices.Reverse(m)
			sites = append(sites, m...)
		}
	}
	pyGlob(e.VirtualEnv)
	pyGlob(e.Conda)
	if e.Home != "" {
		pyGlob(filepath.Join(e.Home, ".local"))
	}
	pyGlob("/usr/local")
	pyGlob("/usr")
	for _, pat := range []string{"/opt/*/.venv", "/opt/*/venv", "/opt/conda"} {
		m, _ := filepath.Glob(pat)
		slices.Sort(m)
		for _, p := range m {
			pyGlob(p)
		}
	}
	for _, site := range sites {
		out = append(out, dirWhere{filepath.Join(site, "nvidia", "cu13", "lib"), "pip wheel"})
		if s.Wheel != "" {
			out = append(out, dirWhere{filepath.Join(site, filepath.FromSlash(s.Wheel)), "pip wheel"})
		}
	}
	return out
}

// NotFound formats the one-line error for a library that could not be
// opened: what, every place looked, and the last dlopen error if any.
// The error wraps sentinel.
func NotFound(pkg string, s Spec, looked []string, lastErr error, sentinel error) error {
	msg := fmt.Sprintf("%s: %s not found (looked in %s)", pkg, s.What, strings.Join(looked, ", "))
	if lastErr != nil {
		msg += "; last error: " + oneLine(lastErr.Error())
	}
	return &NotFoundError{msg: msg, sentinel: sentinel}
}

// NotFoundError is the error of a library that no candidate provided.
type NotFoundError struct {
	msg      string
	sentinel error
}

func (e *NotFoundError) Error() string { return e.msg }
func (e *NotFoundError) Unwrap() error { return e.sentinel }

// Open dlopens the first candidate of s that loads and returns its handle
// and name. The error is a *NotFoundError wrapping sentinel, one line long.
func (e Env) Open(pkg string, s Spec, sentinel error) (handle uintptr, name string, err error) {
	cands, looked := e.Candidates(s)
	var last error
	for _, c := range cands {
		h, err := purego.Dlopen(c.Name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, c.Name, nil
		}
		// A soname the system loader does not know is the normal case, not
		// worth reporting; a file that exists but fails to load is.
		if !strings.Contains(err.Error(), "cannot open shared object file") || strings.ContainsRune(c.Name, '/') {
			last = err
		}
	}
	return 0, "", NotFound(pkg, s, looked, last, sentinel)
}

// Symbols resolves each name into its address; a missing symbol is an
// error naming the library and the symbol.
func Symbols(pkg, lib string, h uintptr, syms map[string]*uintptr) error {
	names := make([]string, 0, len(syms))
	for name := range syms {
		names = append(names, name)
	}
	slices.Sort(names) // the same symbol is reported on every run
	for _, name := range names {
		at := syms[name]
		p, err := purego.Dlsym(h, name)
		if err != nil || p == 0 {
			return fmt.Errorf("%s: %s: symbol %s not found: %v", pkg, lib, name, err)
		}
		*at = p
	}
	return nil
}

// Table maps the symbol named by the `sym` tag of each field of the
// struct fns points to onto that field's address: a library's functions
// are named once, beside the uintptr fields that hold them. Fields without
// a sym tag are left out. It panics when fns is not a pointer to a struct
// or a tagged field is not a uintptr.
func Table(fns any) map[string]*uintptr {
	v := reflect.ValueOf(fns).Elem()
	syms := make(map[string]*uintptr, v.NumField())
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name := f.Tag.Get("sym")
		if name == "" {
			continue
		}
		if f.Type.Kind() != reflect.Uintptr {
			panic("libfind: " + v.Type().String() + "." + f.Name + ": a sym tag on a " + f.Type.String() + ", want uintptr")
		}
		syms[name] = (*uintptr)(v.Field(i).Addr().UnsafePointer())
	}
	return syms
}

// Load opens the library as Open does and resolves syms in it as Symbols
// does, naming the library by the file it was mapped from (Resolve), which
// it returns with the handle.
func (e Env) Load(pkg string, s Spec, sentinel error, syms map[string]*uintptr) (handle uintptr, path string, err error) {
	h, name, err := e.Open(pkg, s, sentinel)
	if err != nil {
		return 0, "", err
	}
	path = Resolve(name)
	if err := Symbols(pkg, path, h, syms); err != nil {
		return 0, "", err
	}
	return h, path, nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// GoString copies the NUL-terminated C string at p (at most 64 KiB); p == 0
// gives "".
func GoString(p uintptr) string {
	if p == 0 {
		return ""
	}
	start := *(**byte)(unsafe.Pointer(&p))
	n := 0
	for n < 1<<16 && *(*byte)(unsafe.Add(unsafe.Pointer(start), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(start, n))
}

// Resolve returns the file a library opened by name is mapped from, read
// from /proc/self/maps; name itself when it is a path or is not found there.
func Resolve(name string) string {
	if strings.ContainsRune(name, '/') {
		return name
	}
	stem, _, _ := strings.Cut(name, ".so")
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return name
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		if p := f[len(f)-1]; strings.HasPrefix(filepath.Base(p), stem+".so") {
			return p
		}
	}
	return name
}
