package tensor

import (
	"fmt"
	"strconv"
	"strings"
)

// Device says where a tensor's elements live: in host memory (CPU, the
// zero value) or in the memory of an accelerator of some kind ("cuda")
// and index. Devices are small comparable values; two tensors are on the
// same device exactly when their Devices are ==.
type Device struct {
	kind  string // "" for the CPU
	index int
}

// CPU is host memory, where New, FromSlice and every op on host tensors
// put their results.
var CPU = Device{}

// CUDA returns the i-th CUDA device. Ops on it need the CUDA backend to be
// registered (by importing the package that implements it).
func CUDA(i int) Device { return NewDevice("cuda", i) }

// NewDevice returns device index i of the given kind ("cpu" gives CPU). It
// panics on an empty or malformed kind or a negative index: devices are
// written in programs, not read from users (see ParseDevice).
func NewDevice(kind string, i int) Device {
	if kind == "cpu" && i == 0 {
		return CPU
	}
	if !validKind(kind) || kind == "cpu" || i < 0 {
		panicf("NewDevice: invalid device %q index %d", kind, i)
	}
	return Device{kind: kind, index: i}
}

func validKind(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// ParseDevice parses "cpu", "cuda" (index 0), "cuda:1" and likewise for
// any lower-case kind, as PyTorch writes devices. It does not check that a
// backend for the kind is registered: the first op on the device does.
func ParseDevice(s string) (Device, error) {
	kind, idx, hasIdx := strings.Cut(s, ":")
	i := 0
	if hasIdx {
		n, err := strconv.Atoi(idx)
		if err != nil || n < 0 || idx != strconv.Itoa(n) {
			return CPU, fmt.Errorf("tensor: device %q: index %q is not a non-negative integer", s, idx)
		}
		i = n
	}
	if !validKind(kind) {
		return CPU, fmt.Errorf("tensor: device %q: want cpu, cuda or cuda:N", s)
	}
	if kind == "cpu" {
		if i != 0 {
			return CPU, fmt.Errorf("tensor: device %q: the CPU has index 0 only", s)
		}
		return CPU, nil
	}
	return Device{kind: kind, index: i}, nil
}

// Kind returns "cpu" or the accelerator's kind ("cuda").
func (d Device) Kind() string {
	if d.kind == "" {
		return "cpu"
	}
	return d.kind
}

// Index returns the device's index among those of its kind (0 for the
// CPU).
func (d Device) Index() int { return d.index }

// IsCPU reports whether d is host memory.
func (d Device) IsCPU() bool { return d.kind == "" }

// String returns "cpu" or kind:index ("cuda:0"), as PyTorch prints them;
// ParseDevice reads it back.
func (d Device) String() string {
	if d.kind == "" {
		return "cpu"
	}
	return d.kind + ":" + strconv.Itoa(d.index)
}

// DType is the element type of a tensor's storage. Every tensor is Float32
// today; BFloat16 is reserved for device buffers (mixed precision on
// accelerators) and the CPU bf16 kernels to come. A Buffer reports its
// DType; the tensor ops accept Float32 only until those kernels exist.
type DType uint8

const (
	Float32  DType = iota // IEEE 754 binary32: every host tensor
	BFloat16              // bfloat16 (8-bit exponent, 7-bit mantissa); reserved
)

// Size returns the bytes per element.
func (t DType) Size() int {
	if t == BFloat16 {
		return 2
	}
	return 4
}

func (t DType) String() string {
	switch t {
	case Float32:
		return "float32"
	case BFloat16:
		return "bfloat16"
	}
	return "DType(" + strconv.Itoa(int(t)) + ")"
}
