// Package cuda drives an NVIDIA GPU through the CUDA driver API
// (libcuda.so.1), loaded at run time without cgo through
// github.com/ebitengine/purego. There is no CUDA runtime (libcudart): the
// driver API is the stable ABI the driver itself ships, so a cohort binary
// runs with whatever driver a machine has, and without one it still runs
// (on the CPU) and says why the GPU is unavailable.
//
// # Getting a device
//
//	ctx, err := cuda.Open(0) // load, cuInit, retain device 0's primary context
//	if errors.Is(err, cuda.ErrNoDevice) { … }
//	defer ctx.Close()
//
// [Load] finds libcuda.so.1 in COHORT_CUDA_LIB_DIR, then through the system
// loader; a machine without it gets one line naming where it looked
// (wrapping [ErrNotFound]). A driver without a device gets one line naming
// the library and driver version found (wrapping [ErrNoDevice]).
//
// # What the package covers
//
// Device discovery and attributes ([Driver.Info]), the primary context,
// device and pinned host memory, synchronous and stream-ordered memset and
// copies, streams, events (record, wait, query, elapsed time), modules
// loaded from PTX (the JIT log captured; PTX newer than the driver is a
// [*VersionError] naming both versions) and kernel launches with arguments
// packed by [Args]. Every failed driver call is a [*Error] carrying the
// call, the CUresult and its name and description.
//
// # Ownership, concurrency, blocking
//
// A [*Context] may be used from any goroutine: each method makes the
// context current on its OS thread for the duration of the call. Work is
// ordered by streams, not by goroutines: two launches on one stream run in
// order, on two streams in any order unless an event joins them. Methods
// named Sync, the blocking copies, MemFree and Close block the calling
// goroutine until the device has finished the work they wait for; the
// Async methods, Record, StreamWaitEvent and Launch only enqueue.
// Device memory, streams, events and modules belong to the caller, who
// frees them (MemFree, DestroyStream, DestroyEvent, Unload) before Close;
// host memory handed to an Async copy must stay valid until its stream has
// passed the copy.
package cuda
