package cuda

import (
	"errors"
	"fmt"
)

// Sentinels that a *Error (or Open's error) wraps, for errors.Is.
var (
	ErrNotFound    = errors.New("cuda: driver library not found")
	ErrNoDevice    = errors.New("cuda: no CUDA device")
	ErrOutOfMemory = errors.New("cuda: out of device memory")
)

// Result codes (CUresult) that cohort treats specially.
const (
	Success                    = 0
	ErrorOutOfMemoryCode       = 2
	ErrorNotInitialized        = 3
	ErrorNoBinaryForGPU        = 209
	ErrorInvalidPTX            = 218
	ErrorUnsupportedPTXVersion = 222
	ErrorNoDeviceCode          = 100
	ErrorNotReady              = 600
)

// Error is a driver call that failed.
type Error struct {
	Call string // the driver function: "cuMemAlloc_v2"
	Code int    // the CUresult
	Name string // cuGetErrorName: "CUDA_ERROR_OUT_OF_MEMORY"
	Msg  string // cuGetErrorString: "out of memory"
	// Detail is extra context added by cohort (a JIT log, sizes), "" if none.
	Detail string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, e.Code, e.Msg)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap lets errors.Is match ErrNoDevice and ErrOutOfMemory.
func (e *Error) Unwrap() error {
	switch e.Code {
	case ErrorNoDeviceCode:
		return ErrNoDevice
	case ErrorOutOfMemoryCode:
		return ErrOutOfMemory
	}
	return nil
}

// errorNames is the fallback when cuGetErrorName is unavailable or fails.
var errorNames = map[int]string{
	1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 3: "CUDA_ERROR_NOT_INITIALIZED",
	4: "CUDA_ERROR_DEINITIALIZED", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
	200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	218: "CUDA_ERROR_INVALID_PTX", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", 400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND", 600: "CUDA_ERROR_NOT_READY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 702: "CUDA_ERROR_LAUNCH_TIMEOUT", 719: "CUDA_ERROR_LAUNCH_FAILED",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 999: "CUDA_ERROR_UNKNOWN",
}
