// Package nvrtc compiles CUDA C to PTX at run time with NVIDIA's NVRTC
// library, loaded without cgo through github.com/ebitengine/purego, and
// caches the PTX on disk.
//
// The one call most code needs:
//
//	ptx, err := nvrtc.Compile(src, "saxpy.cu", nvrtc.Options{Arch: "compute_80"})
//	// ptx.PTX is the text to hand to cuda.Context.LoadModule.
//
// Kernels should be declared extern "C" so that their names in the PTX
// are the names in the source.
//
// A virtual arch (compute_80, compute_90) gives PTX, which the driver
// JIT-compiles on load and which needs a driver at least as new as NVRTC
// (PTX is forward compatible: compute_80 PTX runs on an H100). A real arch
// (sm_90) gives a CUBIN in PTX.CUBIN, device code for that GPU only, which
// a driver of the same CUDA major version loads even when it is older than
// NVRTC (cuda.Context.LoadCUBIN).
//
// # Finding the library
//
// [Load] looks for libnvrtc (sonames libnvrtc.so.13, .12, .11.2, libnvrtc.so)
// in COHORT_CUDA_LIB_DIR (when set, the only place looked), CUDA_HOME/lib64,
// CUDA_PATH/lib64, /usr/local/cuda*/lib64, pip's nvidia-* wheels
// (site-packages/nvidia/cu13/lib and nvidia/cuda_nvrtc/lib under
// VIRTUAL_ENV, CONDA_PREFIX, ~/.local, /usr/lib, /usr/local/lib, /opt/*),
// then the system loader. A machine without it gets one error line naming
// the library and every place looked; it wraps [ErrNotFound].
//
// # Errors
//
// A source that does not compile returns a [*CompileError] holding NVRTC's
// log (file:line: error: …), the program name and the arch.
//
// # Cache
//
// Compiled PTX is kept under os.UserCacheDir()/cohort/ptx (or
// COHORT_CACHE_DIR/ptx), one file per sha256 of (source, options, arch,
// NVRTC version). Files are written to a temporary name and renamed, so
// concurrent processes never see half a file; each file carries the sha256
// of its PTX, and an entry that fails that check is compiled again and
// rewritten. A cache that cannot be written is not an error: the PTX is
// returned and the failure is reported in [PTX.CacheErr].
//
// # Concurrency and ownership
//
// A [*Lib] is safe for concurrent use; compiles are serialised on a mutex
// (NVRTC's own thread safety varies by version), so Compile blocks while
// another compile runs. The default library behind [Compile] is loaded once
// per process, on first use, and stays loaded. The returned [PTX] is owned
// by the caller.
package nvrtc
