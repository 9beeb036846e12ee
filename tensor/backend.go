package tensor

import (
	"slices"
	"sync"
)

// Buffer is a device's memory for the elements of one or more tensors:
// opaque to this package, which only hands it back to the backend that
// made it. A tensor on a device is a view (shape, strides, offset in
// elements) of a Buffer, as a host tensor is of a slice.
type Buffer interface {
	Device() Device
	DType() DType
	Len() int // elements
}

// Backend runs the ops of tensors on the devices of one kind. Every op
// method receives tensors on one device of that kind (the package checked
// it) with shapes already checked; dst, y and the other outputs are
// allocated by the package (through Alloc) with the shapes the CPU op
// gives and are written whole unless the method says it accumulates.
// Views reach a method as they are (strided, transposed, or broadcast
// with zero strides): a backend handles them or makes contiguous copies.
// Each method computes what the CPU function named in its comment
// computes; package tensor/devicetest checks that on random inputs.
//
// Methods panic (with the backend's package prefix) on failures they
// cannot return, as the CPU ops do on misuse; a device out of memory is
// reported by Alloc's panic naming the size asked and what is reserved.
// A backend may run ops asynchronously (in stream order) as long as each
// one sees its predecessors' results and Download waits for them.
type Backend interface {
	// Alloc returns a zeroed buffer of n elements of dtype on dev. A
	// buffer nobody references any more is the backend's to reclaim (a
	// cleanup attached to it); Release reclaims one sooner.
	Alloc(dev Device, dtype DType, n int) Buffer
	// Release hands back a buffer that will not be used again: Recycle
	// calls it for a device tensor that owns its whole buffer, as autograd
	// does with intermediate results, so that a caching allocator can
	// reuse the memory at once instead of waiting for the garbage
	// collector. A later use of the buffer is a programmer error.
	Release(buf Buffer)
	// Upload copies src into dst's elements [off, off+len(src)).
	Upload(dst Buffer, off int, src []float32)
	// Download copies src's elements [off, off+len(dst)) into dst.
	Download(dst []float32, src Buffer, off int)

	Copy(dst, src *Tensor)                                // dst.CopyFrom(src), src of dst's shape
	Fill(dst *Tensor, v float32)                          // dst.Fill(v)
	Binary(op BinaryOp, alpha float32, dst, a, b *Tensor) // ApplyBinary; a and b of dst's shape
	Unary(op UnaryOp, c float32, dst, a *Tensor)          // ApplyUnary
	ReLUBackward(dst, dy, y *Tensor)                      // ReLUBackwardInto
	// GELUTanhBackward is GELUTanhBackwardInto, or with db non-nil
	// GELUTanhBackwardSumInto (db accumulates).
	GELUTanhBackward(dst, dy, x, db *Tensor)
	Gemm(dst, a, b *Tensor, alpha, beta float32)           // Gemm
	Linear(h, x, w, b, r, y *Tensor, act Activation)       // LinearInto
	Sum(dst, src *Tensor)                                  // SumInto (accumulates)
	Softmax(dst, x *Tensor, dim int, log bool)             // Softmax, LogSoftmax
	SoftmaxBackward(dst, y, dy *Tensor, dim int, log bool) // SoftmaxBackward, LogSoftmaxBackward
	// CrossEntropy is CrossEntropy: loss is [N] (ReduceNone) or a
	// scalar, prob [N, C]. Targets are valid (checked on the host).
	CrossEntropy(loss, prob, logits *Tensor, target []int64, o CrossEntropyOptions)
	// CrossEntropyBackward is CrossEntropyBackward, overwriting prob.
	CrossEntropyBackward(prob, g *Tensor, target []int64, o CrossEntropyOptions)
	// LayerNorm is LayerNorm with the row statistics as [rows] tensors; w
	// and b may be nil.
	LayerNorm(y, mean, rstd, x, w, b *Tensor, eps float64)
	// LayerNormBackward is LayerNormBackward; dw and db are nil when w is.
	LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd *Tensor)
	// Attention is AttentionQKV: it writes y and returns what its own
	// AttentionBackward needs of the forward pass (saved, on y's device),
	// in a form of the backend's choosing that nothing else reads: the CPU
	// twin's probabilities [B, nHead, T, T], or a flash kernel's
	// log-sum-exp per score row [B, nHead, T], which spares the T×T
	// matrix (9.6 GB per layer at GPT-2's batch 16 × 1024).
	Attention(y, qkv *Tensor, nHead int, causal bool) (saved *Tensor)
	// AttentionBackward is AttentionQKVBackward, given the forward pass's
	// saved state.
	AttentionBackward(dqkv, dy, qkv, saved *Tensor, nHead int, causal bool)
	Conv2d(y, x, w, b *Tensor, stride, padding int, act Activation) // Conv2d, Conv2dReLU (b may be nil)
	// Conv2dBackward is Conv2dBackward (act Identity) or Conv2dReLUBackward
	// (act ReLUAct, y the forward output); dx is nil when not wanted.
	Conv2dBackward(dx, dw, db, dy, y, x, w *Tensor, stride, padding int, act Activation)
	MaxPool2d(y, x *Tensor, kernel, stride, padding int)              // MaxPool2d's values
	MaxPool2dBackward(dx, dy, x *Tensor, kernel, stride, padding int) // MaxPool2dBackwardFromInput
	AvgPool2d(y, x *Tensor, kernel, stride, padding int)              // AvgPool2d
	AvgPool2dBackward(dx, dy *Tensor, kernel, stride, padding int)    // AvgPool2dBackward
	IndexRows(dst, w *Tensor, idx []int64)                            // IndexRows; indices valid
	IndexAddRows(dst *Tensor, idx []int64, src *Tensor)               // IndexAddRows; indices valid
}

// The backends, by device kind. Like database/sql's drivers this is
// package-level state, and acceptable for the same reasons: it is written
// only by init functions of the packages that implement a kind (never by
// configuration or at run time), each kind once, and read-only after; the
// choice of device stays with the caller, on every tensor.
var backends struct {
	sync.RWMutex
	m map[string]Backend
}

// Register makes b the backend of the devices of kind. It is called from
// the init function of the package implementing the kind, and panics when
// kind is "cpu", invalid or registered already, or b is nil.
func Register(kind string, b Backend) {
	backends.Lock()
	defer backends.Unlock()
	if b == nil || !validKind(kind) || kind == "cpu" {
		panicf("Register: invalid backend for device kind %q", kind)
	}
	if _, dup := backends.m[kind]; dup {
		panicf("Register: device kind %q registered twice", kind)
	}
	if backends.m == nil {
		backends.m = map[string]Backend{}
	}
	backends.m[kind] = b
}

// BackendOf returns the backend of dev's kind, nil for the CPU, and
// whether there is one.
func BackendOf(dev Device) (Backend, bool) {
	if dev.IsCPU() {
		return nil, true
	}
	backends.RLock()
	b, ok := backends.m[dev.kind]
	backends.RUnlock()
	return b, ok
}

func backendOf(op string, dev Device) Backend {
	b, ok := BackendOf(dev)
	if !ok {
		panicf("%s: no backend for device %v (import the package that implements %q)", op, dev, dev.kind)
	}
	return b
}

// Device returns where t's elements live.
func (t *Tensor) Device() Device {
	if t.buf == nil {
		return CPU
	}
	return t.buf.Device()
}

// DType returns the element type: Float32 for every host tensor.
func (t *Tensor) DType() DType {
	if t.buf == nil {
		return Float32
	}
	return t.buf.DType()
}

// Buffer returns the device buffer t views, nil for a host tensor. It is
// for backends; Offset, Shape and Strides place the view in it.
func (t *Tensor) Buffer() Buffer { return t.buf }

// notHost panics for a host accessor (op) called on a device tensor,
// naming the device.
func (t *Tensor) notHost(op string) {
	panicf("%s: tensor of shape %v is on %v, not in host memory (move it with To(tensor.CPU))", op, t.shape, t.Device())
}

// NewOn returns a contiguous zero tensor of the given shape on dev.
func NewOn(dev Device, shape ...int) *Tensor {
	if dev.IsCPU() {
		return New(shape...)
	}
	n := checkShape("NewOn", shape)
	buf := backendOf("NewOn", dev).Alloc(dev, Float32, n)
	return &Tensor{buf: buf, shape: cloneInts(shape), strides: contiguousStrides(shape)}
}

// EmptyOn is Empty on dev: a contiguous tensor whose elements are
// unspecified (for a destination written whole).
func EmptyOn(dev Device, shape ...int) *Tensor {
	if dev.IsCPU() {
		return Empty(shape...)
	}
	return NewOn(dev, shape...)
}

// FullOn returns a tensor of the given shape on dev filled with v.
func FullOn(dev Device, v float32, shape ...int) *Tensor {
	t := NewOn(dev, shape...)
	if v != 0 {
		t.Fill(v)
	}
	return t
}

// FromBuffer returns a view (shape, strides, offset) of a device buffer,
// for backends and device-side code. It panics when the view reaches
// outside the buffer.
func FromBuffer(buf Buffer, offset int, shape, strides []int) *Tensor {
	if buf == nil || buf.Device().IsCPU() {
		panicf("FromBuffer: no device buffer")
	}
	checkView("FromBuffer", buf.Len(), offset, shape, strides)
	return &Tensor{buf: buf, offset: offset, shape: cloneInts(shape), strides: cloneInts(strides)}
}

// FromStorage returns a host view (shape, strides, offset) of storage: the
// strided form of FromSlice, for backends that run host code over their
// own memory. It panics when the view reaches outside storage.
func FromStorage(storage []float32, offset int, shape, strides []int) *Tensor {
	checkView("FromStorage", len(storage), offset, shape, strides)
	return &Tensor{storage: storage, offset: offset, shape: cloneInts(shape), strides: cloneInts(strides)}
}

func checkView(op string, n, offset int, shape, strides []int) {
	if len(shape) != len(strides) {
		panicf("%s: shape %v and strides %v differ in length", op, shape, strides)
	}
	lo, hi := offset, offset
	for i, s := range shape {
		if s < 0 {
			panicf("%s: negative dimension in shape %v", op, shape)
		}
		if s == 0 {
			return // empty: no element is reached
		}
		if st := strides[i]; st >= 0 {
			hi += (s - 1) * st
		} else {
			lo += (s - 1) * st
		}
	}
	if lo < 0 || hi >= n {
		panicf("%s: view (offset %d, shape %v, strides %v) outside %d elements", op, offset, shape, strides, n)
	}
}

// To returns t on dev: t itself when it is there already, else a
// contiguous copy there. Moves are explicit; no op moves its operands.
func (t *Tensor) To(dev Device) *Tensor {
	from := t.Device()
	if from == dev {
		return t
	}
	switch {
	case from.IsCPU():
		out := NewOn(dev, t.shape...)
		if n := t.Len(); n > 0 {
			backendOf("To", dev).Upload(out.buf, 0, t.Contiguous().Data())
		}
		return out
	case dev.IsCPU():
		out := New(t.shape...)
		if n := t.Len(); n > 0 {
			c := t.Contiguous()
			backendOf("To", from).Download(out.storage, c.buf, c.offset)
		}
		return out
	}
	return t.To(CPU).To(dev) // between devices: through the host
}

// deviceOf returns the device and backend of an op's operands (nil ones
// skipped), panicking when they are on different devices, naming the op
// and both devices.
func deviceOf(op string, ts ...*Tensor) (Device, Backend) {
	var dev Device
	first := true
	for _, t := range ts {
		if t == nil {
			continue
		}
		d := t.Device()
		if first {
			dev, first = d, false
			continue
		}
		if d != dev {
			panicf("%s: operands on %v and %v", op, dev, d)
		}
	}
	if dev.IsCPU() {
		return dev, nil
	}
	be := backendOf(op, dev)
	for _, t := range ts {
		if t != nil && t.buf.DType() != Float32 {
			panicf("%s: %v operand on %v: only float32 ops exist yet", op, t.buf.DType(), dev)
		}
	}
	return dev, be
}

// unsupported panics for an op that has no device form yet.
func unsupported(op string, dev Device) {
	panicf("%s: not available on %v yet (run it on the CPU)", op, dev)
}

// BinaryOp names a binary elementwise op for Backend.Binary.
type BinaryOp uint8

// The binary ops: dst = f(a, b).
const (
	BinaryCopy = BinaryOp(opCopy) // b
	BinaryAdd  = BinaryOp(opAdd)  // a + b
	BinarySub  = BinaryOp(opSub)  // a − b
	BinaryMul  = BinaryOp(opMul)  // a · b
	BinaryDiv  = BinaryOp(opDiv)  // a / b
	BinaryAxpy = BinaryOp(opAxpy) // a + alpha·b
	BinaryMax  = BinaryOp(opMax)  // max(a, b)
	BinaryMin  = BinaryOp(opMin)  // min(a, b)
)

// ApplyBinary writes op(a, b) into dst (shapes broadcast as AddInto);
// alpha is used by BinaryAxpy only. It is the op behind AddInto and its
// siblings, for backends and conformance tests.
func ApplyBinary(op BinaryOp, alpha float32, dst, a, b *Tensor) {
	if op > BinaryMin {
		panicf("ApplyBinary: unknown op %d", op)
	}
	binaryIntoAlpha("ApplyBinary", binOp(op), alpha, dst, a, b)
}

// UnaryOp names a unary elementwise op for Backend.Unary.
type UnaryOp uint8

// The unary ops: dst = f(a) (c is the op's constant where it has one).
const (
	UnaryNeg UnaryOp = iota
	UnaryExp
	UnaryLog
	UnarySqrt
	UnaryTanh
	UnarySigmoid
	UnaryReLU
	UnaryAbs
	UnaryGELU
	UnaryGELUTanh
	UnarySiLU
	UnarySquare
	UnaryAddScalar // a + c
	UnaryScale     // c·a
	UnaryPow       // aᶜ
)

// ApplyUnary writes op(a) into dst (a's shape), for backends and
// conformance tests.
func ApplyUnary(op UnaryOp, c float32, dst, a *Tensor) {
	if op > UnaryPow {
		panicf("ApplyUnary: unknown op %d", op)
	}
	unary("ApplyUnary", unOp(op), c, dst, a)
}

// deviceBinary is binaryIntoAlpha (dst nil: binary) for operands on a
// device.
func deviceBinary(name string, op binOp, alpha float32, dst, a, b *Tensor) *Tensor {
	dev, be := deviceOf(name, dst, a, b)
	shape := binaryShape(name, a, b)
	if dst == nil {
		dst = NewOn(dev, shape...)
	} else if !slices.Equal(shape, dst.shape) {
		panicf("%s: destination shape %v, want %v (from %v and %v)", name, dst.shape, shape, a.shape, b.shape)
	}
	if op == opCopy {
		be.Copy(dst, b.Expand(shape...))
		return dst
	}
	be.Binary(BinaryOp(op), alpha, dst, a.Expand(shape...), b.Expand(shape...))
	return dst
}

func deviceUnary(name string, op unOp, c float32, dst, a *Tensor) *Tensor {
	dev, be := deviceOf(name, dst, a)
	if dst == nil {
		dst = NewOn(dev, a.shape...)
	} else if !slices.Equal(dst.shape, a.shape) {
		panicf("%s: destination shape %v, want %v", name, dst.shape, a.shape)
	}
	be.Unary(UnaryOp(op), c, dst, a)
	return dst
}
