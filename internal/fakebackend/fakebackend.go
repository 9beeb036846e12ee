// Package fakebackend is a fake accelerator for tests: device kind "fake",
// whose buffers live in host memory of their own that the CPU path never
// sees (a tensor on it has no host storage, so an op that misses its
// device dispatch panics instead of computing), and whose backend runs
// the CPU twin of every op over those buffers. Its results therefore equal
// the CPU's bit for bit, which is what lets the device seam (dispatch,
// moves, autograd, nn.To, the optimizers) be tested end to end without a
// GPU. It counts transfers and ops.
//
// Importing the package registers the kind; it is meant for _test.go files.
package fakebackend

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// Kind is the device kind the package registers.
const Kind = "fake"

// Device returns fake device i.
func Device(i int) tensor.Device { return tensor.NewDevice(Kind, i) }

// Counters are the backend's running totals since the process started.
type Counters struct {
	Uploads, Downloads         int64 // host→device and device→host copies
	UploadBytes, DownloadBytes int64
	Ops                        int64 // op methods called (Alloc and transfers excluded)
	Allocs, Releases           int64 // buffers made, and handed back by tensor.Recycle
}

var counters struct {
	uploads, downloads, uploadBytes, downloadBytes, ops, allocs, releases atomic.Int64
}

// Stats returns the counters; tests compare two readings.
func Stats() Counters {
	return Counters{
		Uploads: counters.uploads.Load(), Downloads: counters.downloads.Load(),
		UploadBytes: counters.uploadBytes.Load(), DownloadBytes: counters.downloadBytes.Load(),
		Ops: counters.ops.Load(), Allocs: counters.allocs.Load(), Releases: counters.releases.Load(),
	}
}

// Sub returns c − o, counter by counter.
func (c Counters) Sub(o Counters) Counters {
	return Counters{c.Uploads - o.Uploads, c.Downloads - o.Downloads, c.UploadBytes - o.UploadBytes,
		c.DownloadBytes - o.DownloadBytes, c.Ops - o.Ops, c.Allocs - o.Allocs, c.Releases - o.Releases}
}

func init() { tensor.Register(Kind, backend{}) }

// buffer is a fake device's memory.
type buffer struct {
	dev      tensor.Device
	data     []float32
	released bool // by Recycle: any later use panics
}

func (b *buffer) Device() tensor.Device { return b.dev }
func (b *buffer) DType() tensor.DType   { return tensor.Float32 }
func (b *buffer) Len() int              { return len(b.data) }

// DevicePtr is the address of element off, as a real device buffer gives
// its device address to a collective backend (the fake NCCL resolves it
// through Bytes).
func (b *buffer) DevicePtr(off int) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b.data))) + uintptr(4*off)
}

// ComputeStream is 0: the fake runs every op at once, on no stream.
func (b *buffer) ComputeStream() uintptr { return 0 }

// Bytes returns the memory of fake device tensor t's buffer, for fakes of
// lower layers (a fake NCCL) that must reach what a device address
// names. It panics when t is not on a fake device.
func Bytes(t *tensor.Tensor) []byte {
	b, ok := t.Buffer().(*buffer)
	if !ok {
		panic(fmt.Sprintf("fakebackend: Bytes: tensor on %v", t.Device()))
	}
	if len(b.data) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&b.data[0])), 4*len(b.data))
}

type backend struct{}

var (
	_ tensor.Backend      = backend{}
	_ optim.DeviceKernels = backend{}
)

// h returns the host view of device tensor t over its buffer's memory
// (nil for nil), counting one op when count is set.
func h(t *tensor.Tensor) *tensor.Tensor {
	if t == nil {
		return nil
	}
	b, ok := t.Buffer().(*buffer)
	if !ok || b.released {
		panic(fmt.Sprintf("fakebackend: tensor of shape %v on %v: its buffer was released by tensor.Recycle", t.Shape(), t.Device()))
	}
	return tensor.FromStorage(b.data, t.Offset(), t.Shape(), t.Strides())
}

func op() { counters.ops.Add(1) }

func (backend) Alloc(dev tensor.Device, dtype tensor.DType, n int) tensor.Buffer {
	if dtype != tensor.Float32 {
		panic(fmt.Sprintf("fakebackend: Alloc: %v buffers are not implemented", dtype))
	}
	counters.allocs.Add(1)
	return &buffer{dev: dev, data: make([]float32, n)}
}

func (backend) Release(buf tensor.Buffer) {
	b := buf.(*buffer)
	if b.released {
		panic(fmt.Sprintf("fakebackend: Release: buffer of %d elements on %v released twice", len(b.data), b.dev))
	}
	counters.releases.Add(1)
	b.released, b.data = true, nil
}

func (backend) Upload(dst tensor.Buffer, off int, src []float32) {
	counters.uploads.Add(1)
	counters.uploadBytes.Add(int64(4 * len(src)))
	copy(dst.(*buffer).data[off:off+len(src)], src)
}

func (backend) Download(dst []float32, src tensor.Buffer, off int) {
	counters.downloads.Add(1)
	counters.downloadBytes.Add(int64(4 * len(dst)))
	copy(dst, src.(*buffer).data[off:off+len(dst)])
}

func (backend) Copy(dst, src *tensor.Tensor)       { op(); h(dst).CopyFrom(h(src)) }
func (backend) Fill(dst *tensor.Tensor, v float32) { op(); h(dst).Fill(v) }

func (backend) Binary(o tensor.BinaryOp, alpha float32, dst, a, b *tensor.Tensor) {
	op()
	tensor.ApplyBinary(o, alpha, h(dst), h(a), h(b))
}

func (backend) Unary(o tensor.UnaryOp, c float32, dst, a *tensor.Tensor) {
	op()
	tensor.ApplyUnary(o, c, h(dst), h(a))
}

func (backend) ReLUBackward(dst, dy, y *tensor.Tensor) {
	op()
	tensor.ReLUBackwardInto(h(dst), h(dy), h(y))
}

func (backend) GELUTanhBackward(dst, dy, x, db *tensor.Tensor) {
	op()
	if db == nil {
		tensor.GELUTanhBackwardInto(h(dst), h(dy), h(x))
		return
	}
	tensor.GELUTanhBackwardSumInto(h(dst), h(dy), h(x), h(db))
}

func (backend) Gemm(dst, a, b *tensor.Tensor, alpha, beta float32) {
	op()
	tensor.Gemm(h(dst), h(a), h(b), alpha, beta)
}

func (backend) Linear(hh, x, w, b, r, y *tensor.Tensor, act tensor.Activation) {
	op()
	tensor.LinearInto(h(hh), h(x), h(w), h(b), h(r), h(y), act)
}

func (backend) Sum(dst, src *tensor.Tensor) { op(); tensor.SumInto(h(dst), h(src)) }

func (backend) Softmax(dst, x *tensor.Tensor, dim int, log bool) {
	op()
	if log {
		h(dst).CopyFrom(tensor.LogSoftmax(h(x), dim))
		return
	}
	h(dst).CopyFrom(tensor.Softmax(h(x), dim))
}

func (backend) SoftmaxBackward(dst, y, dy *tensor.Tensor, dim int, log bool) {
	op()
	if log {
		h(dst).CopyFrom(tensor.LogSoftmaxBackward(h(y), h(dy), dim))
		return
	}
	h(dst).CopyFrom(tensor.SoftmaxBackward(h(y), h(dy), dim))
}

func (backend) CrossEntropy(loss, prob, logits *tensor.Tensor, target []int64, o tensor.CrossEntropyOptions) {
	op()
	l, p := tensor.CrossEntropy(h(logits), target, o)
	h(loss).CopyFrom(l)
	h(prob).CopyFrom(p)
}

func (backend) CrossEntropyBackward(prob, g *tensor.Tensor, target []int64, o tensor.CrossEntropyOptions) {
	op()
	tensor.CrossEntropyBackward(h(prob), h(g), target, o)
}

func (backend) LayerNorm(y, mean, rstd, x, w, b *tensor.Tensor, eps float64) {
	op()
	hy, m, r := tensor.LayerNorm(h(x), h(w), h(b), eps)
	h(y).CopyFrom(hy)
	copy(h(mean).Data(), m)
	copy(h(rstd).Data(), r)
}

func (backend) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd *tensor.Tensor) {
	op()
	hdx, hdw, hdb := tensor.LayerNormBackward(h(dy), h(x), h(w), h(mean).Data(), h(rstd).Data())
	h(dx).CopyFrom(hdx)
	if dw != nil {
		h(dw).CopyFrom(hdw)
		h(db).CopyFrom(hdb)
	}
}

// Attention keeps the CPU twin's probabilities as its saved state.
func (backend) Attention(y, qkv *tensor.Tensor, nHead int, causal bool) *tensor.Tensor {
	op()
	hy, hp := tensor.AttentionQKV(h(qkv), nHead, causal)
	h(y).CopyFrom(hy)
	p := tensor.NewOn(y.Device(), hp.Shape()...)
	h(p).CopyFrom(hp)
	return p
}

func (backend) AttentionBackward(dqkv, dy, qkv, saved *tensor.Tensor, nHead int, causal bool) {
	op()
	h(dqkv).CopyFrom(tensor.AttentionQKVBackward(h(dy), h(qkv), h(saved), nHead, causal))
}

func (backend) Conv2d(y, x, w, b *tensor.Tensor, stride, padding int, act tensor.Activation) {
	op()
	if act == tensor.ReLUAct {
		h(y).CopyFrom(tensor.Conv2dReLU(h(x), h(w), h(b), stride, padding))
		return
	}
	h(y).CopyFrom(tensor.Conv2d(h(x), h(w), h(b), stride, padding))
}

func (backend) Conv2dBackward(dx, dw, db, dy, y, x, w *tensor.Tensor, stride, padding int, act tensor.Activation) {
	op()
	var hdx, hdw, hdb *tensor.Tensor
	if act == tensor.ReLUAct {
		hdx, hdw, hdb = tensor.Conv2dReLUBackward(h(dy), h(y), h(x), h(w), stride, padding, dx != nil)
	} else {
		hdx, hdw, hdb = tensor.Conv2dBackward(h(dy), h(x), h(w), stride, padding, dx != nil)
	}
	if dx != nil {
		h(dx).CopyFrom(hdx)
	}
	h(dw).CopyFrom(hdw)
	h(db).CopyFrom(hdb)
}

func (backend) MaxPool2d(y, x *tensor.Tensor, kernel, stride, padding int) {
	op()
	hy, _ := tensor.MaxPool2d(h(x), kernel, stride, padding)
	h(y).CopyFrom(hy)
}

func (backend) MaxPool2dBackward(dx, dy, x *tensor.Tensor, kernel, stride, padding int) {
	op()
	h(dx).CopyFrom(tensor.MaxPool2dBackwardFromInput(h(dy), h(x), kernel, stride, padding))
}

func (backend) AvgPool2d(y, x *tensor.Tensor, kernel, stride, padding int) {
	op()
	h(y).CopyFrom(tensor.AvgPool2d(h(x), kernel, stride, padding))
}

func (backend) AvgPool2dBackward(dx, dy *tensor.Tensor, kernel, stride, padding int) {
	op()
	h(dx).CopyFrom(tensor.AvgPool2dBackward(h(dy), dx.Shape(), kernel, stride, padding))
}

func (backend) IndexRows(dst, w *tensor.Tensor, idx []int64) {
	op()
	h(dst).CopyFrom(tensor.IndexRows(h(w), idx))
}

func (backend) IndexAddRows(dst *tensor.Tensor, idx []int64, src *tensor.Tensor) {
	op()
	tensor.IndexAddRows(h(dst), idx, h(src))
}

func data(t *tensor.Tensor) []float32 {
	if t == nil {
		return nil
	}
	return h(t).Data()
}

func (backend) AdamUpdate(param, grad, expAvg, expAvgSq, maxExpAvgSq *tensor.Tensor, hy optim.AdamHyper, step int64) {
	op()
	optim.AdamUpdate(data(param), data(grad), optim.AdamState{ExpAvg: data(expAvg), ExpAvgSq: data(expAvgSq), MaxExpAvgSq: data(maxExpAvgSq)}, hy, step)
}

func (backend) SGDUpdate(param, grad, buf *tensor.Tensor, hy optim.SGDHyper, step int64) {
	op()
	optim.SGDUpdate(data(param), data(grad), data(buf), hy, step)
}

func (backend) GradNorm(g *tensor.Tensor, normType float64) float64 {
	op()
	return optim.NormPart(data(g), normType)
}
