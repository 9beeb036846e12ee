// Package nccl binds NVIDIA's collective communication library
// (libnccl.so.2), loaded at run time through purego: no cgo, and a program
// built with it runs where NCCL is absent until it asks for NCCL.
//
// The library is looked for as libfind describes: COHORT_NCCL_LIBRARY (a
// path or a soname, and nothing else when set), COHORT_CUDA_LIB_DIR, the
// CUDA toolkit's directories, pip's wheels (nvidia/nccl/lib of
// nvidia-nccl-cu12, nvidia/cu13/lib of the CUDA 13 layout) and the system
// loader. When it is not found, Load's error is one line naming libnccl and
// every place looked; it wraps ErrNotFound.
//
// The binding is thin: one method per NCCL function used by cohort's NCCL
// backend (distributed/backend/nccl), errors as *Error naming the call and
// NCCL's own message and last-error text. Device memory and streams are
// plain handles (Ptr, Stream) so that this package needs nothing from
// package cuda; the caller keeps the CUDA context current on the calling
// thread. A Comm is used by one goroutine at a time, except Abort and
// AsyncError, which NCCL allows from any thread.
package nccl
