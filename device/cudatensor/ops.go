package cudatensor

import (
	"fmt"
	"math"
	"slices"

	"github.com/cohortml/cohort/device/cublas"
	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/kernels"
	"github.com/cohortml/cohort/tensor"
)

// backend is tensor.Backend (and optim.DeviceKernels) for kind "cuda".
// Every op queues its kernels and GEMMs on its device's one stream and
// returns; Download waits for the stream. Each method's implementation
// path (kernel table entries, cuBLAS calls) is listed in paths.go.
type backend struct {
	dry *state // set only by the tests: Alloc's buffers come from a dry run
}

func init() { tensor.Register(Kind, backend{}) }

// buf returns t's buffer (t on a CUDA device).
func buf(t *tensor.Tensor) *buffer {
	b, ok := t.Buffer().(*buffer)
	if !ok {
		panic(fmt.Sprintf("cudatensor: tensor on %v is not a CUDA tensor", t.Device()))
	}
	return b
}

// p is the address of t's first element; nil for nil.
func p(t *tensor.Tensor) cuda.DevicePtr {
	if t == nil {
		return 0
	}
	return buf(t).at(t.Offset())
}

// stOf returns the state of t's device.
func stOf(t *tensor.Tensor) *state { return buf(t).st }

// missing panics for an op (or a form of it) that has no CUDA kernel.
func missing(op string, dev tensor.Device, what string) {
	panic(fmt.Sprintf("cudatensor: %s on %v: no CUDA kernel for %s (no CPU fallback: run it on the CPU explicitly)", op, dev, what))
}

// contig panics unless every tensor is contiguous: the kernels read flat
// arrays.
func contig(op string, ts ...*tensor.Tensor) {
	for _, t := range ts {
		if t != nil && !t.IsContiguous() {
			missing(op, t.Device(), fmt.Sprintf("a strided view (shape %v, strides %v); make it contiguous on the device first", t.Shape(), t.Strides()))
		}
	}
}

func n64(t *tensor.Tensor) int64 { return int64(t.Len()) }

// lastDim returns the rows and the last dimension of t.
func lastDim(t *tensor.Tensor) (rows, cols int) {
	s := t.Shape()
	if len(s) == 0 {
		return 1, 1
	}
	cols = s[len(s)-1]
	if cols == 0 {
		return 0, 0
	}
	return t.Len() / cols, cols
}

func (be backend) Alloc(dev tensor.Device, dtype tensor.DType, n int) tensor.Buffer {
	if dtype != tensor.Float32 {
		missing("Alloc", dev, dtype.String()+" buffers")
	}
	if be.dry != nil {
		return be.dry.newBuffer("Alloc", n)
	}
	return must(dev).newBuffer("Alloc", n)
}

// Release returns buf's memory to the caching allocator at once; work
// already queued on the stream still sees it, as later reuse is queued
// after it.
func (backend) Release(buf tensor.Buffer) { buf.(*buffer).release() }

func (backend) Upload(dst tensor.Buffer, off int, src []float32) {
	b := dst.(*buffer)
	if len(src) == 0 {
		return
	}
	b.st.htod("Upload", b.at(off), unsafePtr(src), int64(4*len(src)))
}

func (backend) Download(dst []float32, src tensor.Buffer, off int) {
	b := src.(*buffer)
	if len(dst) == 0 {
		return
	}
	b.st.dtoh("Download", unsafePtr(dst), b.at(off), int64(4*len(dst)))
}

func (backend) Copy(dst, src *tensor.Tensor) {
	s := stOf(dst)
	if !src.IsContiguous() || !dst.IsContiguous() {
		s.gather("Copy", dst, src)
		return
	}
	if n := n64(dst); n > 0 {
		s.dtod("Copy", p(dst), p(src), 4*n)
	}
}

func (backend) Fill(dst *tensor.Tensor, v float32) {
	s := stOf(dst)
	s.into("Fill", dst, func(d *tensor.Tensor) {
		s.launch("Fill", "fill_f32", kernels.Problem{N: n64(d)}, ptr(p(d)), f32(v), i64(n64(d)))
	})
}

// rowBroadcast reports whether t is a contiguous block of cols elements
// repeated over its leading dimensions (strides 0 there, contiguous after:
// a bias [cols] over [rows, cols], a position table [T, D] over a batch
// [B, T, D]), and gives cols.
func rowBroadcast(t *tensor.Tensor) (cols int, ok bool) {
	sh, st := t.Shape(), t.Strides()
	k := 0
	for k < len(sh) && (st[k] == 0 || sh[k] == 1) {
		k++
	}
	cols, want := 1, 1
	for i := len(sh) - 1; i >= k; i-- {
		if sh[i] != 1 && st[i] != want {
			return 0, false
		}
		want *= sh[i]
		cols *= sh[i]
	}
	return cols, k > 0 && cols > 0
}

func (be backend) Binary(op tensor.BinaryOp, alpha float32, dst, a, b *tensor.Tensor) {
	s := stOf(dst)
	if !dst.IsContiguous() {
		s.into("Binary", dst, func(d *tensor.Tensor) { be.Binary(op, alpha, d, a, b) })
		return
	}
	n := n64(dst)
	if op == tensor.BinaryAdd && a.IsContiguous() != b.IsContiguous() {
		if !a.IsContiguous() {
			a, b = b, a // addition commutes
		}
		if cols, ok := rowBroadcast(b); ok && n > 0 {
			rows := int(n) / cols
			s.launch("Binary", "bias_add_f32", kernels.Problem{Rows: rows, Cols: cols}, ptr(p(dst)), ptr(p(a)), ptr(p(b)), i32(rows), i32(cols))
			return
		}
	}
	a, b = s.dense("Binary", a), s.dense("Binary", b)
	name := map[tensor.BinaryOp]string{tensor.BinaryAdd: "add_f32", tensor.BinarySub: "sub_f32", tensor.BinaryMul: "mul_f32"}[op]
	switch {
	case op == tensor.BinaryCopy:
		backend{}.Copy(dst, b)
	case name != "":
		s.launch("Binary", name, kernels.Problem{N: n}, ptr(p(dst)), ptr(p(a)), ptr(p(b)), i64(n))
	case op == tensor.BinaryAxpy:
		// dst = a + alpha·b: copy a, then axpy in place (y += alpha·x).
		if p(dst) != p(a) {
			backend{}.Copy(dst, a)
		}
		s.launch("Binary", "axpy_f32", kernels.Problem{N: n}, ptr(p(dst)), f32(alpha), ptr(p(b)), i64(n))
	case binaryCodes[op] != 0:
		s.launch("Binary", "binary_f32", kernels.Problem{N: n}, ptr(p(dst)), ptr(p(a)), ptr(p(b)), i64(n), i32(binaryCodes[op]))
	default:
		missing("Binary", dst.Device(), fmt.Sprintf("binary op %d", op))
	}
}

func (be backend) Unary(op tensor.UnaryOp, c float32, dst, a *tensor.Tensor) {
	s := stOf(dst)
	if !dst.IsContiguous() {
		s.into("Unary", dst, func(d *tensor.Tensor) { be.Unary(op, c, d, a) })
		return
	}
	a = s.dense("Unary", a)
	n := n64(dst)
	switch op {
	case tensor.UnaryNeg:
		s.launch("Unary", "scale_f32", kernels.Problem{N: n}, ptr(p(dst)), ptr(p(a)), f32(-1), i64(n))
	case tensor.UnaryScale:
		s.launch("Unary", "scale_f32", kernels.Problem{N: n}, ptr(p(dst)), ptr(p(a)), f32(c), i64(n))
	case tensor.UnaryReLU:
		s.launch("Unary", "relu_fwd_f32", kernels.Problem{N: n}, ptr(p(dst)), ptr(p(a)), i64(n))
	case tensor.UnaryGELUTanh:
		s.launch("Unary", "gelu_fwd_f32", kernels.Problem{N: n}, ptr(p(dst)), ptr(p(a)), i64(n))
	default:
		code := unaryCodes[op]
		if code == 0 {
			missing("Unary", dst.Device(), fmt.Sprintf("unary op %d", op))
		}
		s.launch("Unary", "unary_f32", kernels.Problem{N: n}, ptr(p(dst)), ptr(p(a)), i64(n), i32(code), f32(c))
	}
}

func (backend) ReLUBackward(dst, dy, y *tensor.Tensor) {
	contig("ReLUBackward", dst, dy, y)
	n := n64(dst)
	stOf(dst).launch("ReLUBackward", "relu_bwd_f32", kernels.Problem{N: n}, ptr(p(dst)), ptr(p(dy)), ptr(p(y)), i64(n))
}

func (backend) GELUTanhBackward(dst, dy, x, db *tensor.Tensor) {
	contig("GELUTanhBackward", dst, dy, x, db)
	s := stOf(dst)
	n := n64(dst)
	s.launch("GELUTanhBackward", "gelu_bwd_f32", kernels.Problem{N: n}, ptr(p(dst)), ptr(p(dy)), ptr(p(x)), i64(n))
	if db != nil {
		rows, cols := lastDim(dst)
		s.launch("GELUTanhBackward", "bias_grad_f32", kernels.Problem{Cols: cols}, ptr(p(db)), ptr(p(dst)), i32(rows), i32(cols), i32(1))
	}
}

// matrix describes a 2-D view for cuBLAS: row-major with leading
// dimension ld, or transposed (column-major rows).
type matrix struct {
	ptr   cuda.DevicePtr
	trans bool
	ld    int
}

func asMatrix(op string, t *tensor.Tensor, rowStride, colStride, rows, cols int) matrix {
	switch {
	case colStride == 1 || cols == 1:
		return matrix{p(t), false, max(rowStride, cols, 1)}
	case rowStride == 1 || rows == 1:
		return matrix{p(t), true, max(colStride, rows, 1)}
	}
	missing(op, t.Device(), fmt.Sprintf("a matrix view with strides %v (neither rows nor columns contiguous)", t.Strides()))
	return matrix{}
}

// batchOf folds the batch dimensions of t (all but the last two) into one
// stride, or reports that they do not fold.
func batchOf(t *tensor.Tensor) (batch, stride int, ok bool) {
	sh, st := t.Shape(), t.Strides()
	nb := len(sh) - 2
	batch = 1
	for i := 0; i < nb; i++ {
		batch *= sh[i]
	}
	if nb <= 0 {
		return 1, 0, true
	}
	stride = st[nb-1]
	for i := nb - 2; i >= 0; i-- {
		if sh[i+1] != 1 && st[i] != st[i+1]*sh[i+1] {
			return batch, 0, false
		}
	}
	return batch, stride, true
}

func (backend) Gemm(dst, a, b *tensor.Tensor, alpha, beta float32) {
	const op = "Gemm"
	contig(op, dst)
	s := stOf(dst)
	ds := dst.Shape()
	m, n := ds[len(ds)-2], ds[len(ds)-1]
	if len(ds) < 2 || len(a.Shape()) < 2 || len(b.Shape()) < 2 {
		missing(op, dst.Device(), "a vector operand (reshape it to a matrix)")
	}
	as, bs := a.Shape(), b.Shape()
	k := as[len(as)-1]
	if dst.Len() == 0 {
		return
	}
	if k == 0 {
		s.launch(op, "scale_f32", kernels.Problem{N: n64(dst)}, ptr(p(dst)), ptr(p(dst)), f32(beta), i64(n64(dst)))
		return
	}
	ast, bst := a.Strides(), b.Strides()
	batch := dst.Len() / (m * n)
	ba, sa, okA := batchOf(a)
	bb, sb, okB := batchOf(b)
	if !okA || !okB {
		missing(op, dst.Device(), fmt.Sprintf("batch dimensions that do not fold (a %v strides %v, b %v strides %v)", as, ast, bs, bst))
	}
	rowsA := m
	if len(bs) == 2 && len(as) > 2 && ast[len(as)-1] == 1 && ast[len(as)-2] == k && sa == m*k {
		// A contiguous batch times one matrix: fold the batch into rows.
		rowsA, batch, ba = m*batch, 1, 1
	}
	if ba == 1 {
		sa = 0
	}
	if bb == 1 {
		sb = 0
	}
	ma := asMatrix(op, a, ast[len(as)-2], ast[len(as)-1], rowsA, k)
	mb := asMatrix(op, b, bst[len(bs)-2], bst[len(bs)-1], k, n)
	s.gemm(op, cublas.Gemm{TransA: ma.trans, TransB: mb.trans, M: rowsA, N: n, K: k, Alpha: alpha, Beta: beta,
		A: ma.ptr, B: mb.ptr, C: p(dst), LDA: ma.ld, LDB: mb.ld, LDC: n,
		StrideA: int64(sa), StrideB: int64(sb), StrideC: int64(m * n), Batch: batch})
}

func (backend) Linear(h, x, w, b, r, y *tensor.Tensor, act tensor.Activation) {
	const op = "Linear"
	contig(op, h, b, r, y)
	s := stOf(h)
	rows, in := x.Shape()[0], x.Shape()[1]
	out := w.Shape()[0]
	if h.Len() == 0 {
		return
	}
	if in == 0 {
		backend{}.Fill(h, 0)
	} else {
		xs, ws := x.Strides(), w.Strides()
		mx := asMatrix(op, x, xs[0], xs[1], rows, in)
		mw := asMatrix(op, w, ws[0], ws[1], out, in)
		s.gemm(op, cublas.Gemm{TransA: mx.trans, TransB: !mw.trans, M: rows, N: out, K: in, Alpha: 1,
			A: mx.ptr, B: mw.ptr, C: p(h), LDA: mx.ld, LDB: mw.ld, LDC: out})
	}
	n := n64(h)
	if b != nil {
		s.launch(op, "bias_add_f32", kernels.Problem{Rows: rows, Cols: out}, ptr(p(h)), ptr(p(h)), ptr(p(b)), i32(rows), i32(out))
	}
	if r != nil {
		s.launch(op, "add_f32", kernels.Problem{N: n}, ptr(p(h)), ptr(p(h)), ptr(p(r)), i64(n))
	}
	switch act {
	case tensor.ReLUAct:
		s.launch(op, "relu_fwd_f32", kernels.Problem{N: n}, ptr(p(h)), ptr(p(h)), i64(n))
	case tensor.GELUTanhAct:
		s.launch(op, "gelu_fwd_f32", kernels.Problem{N: n}, ptr(p(y)), ptr(p(h)), i64(n))
	}
}

func (backend) Sum(dst, src *tensor.Tensor) {
	const op = "Sum"
	contig(op, dst, src)
	s := stOf(dst)
	switch {
	case dst.Len() == 1:
		s.sumAll(op, p(dst), src, true)
	case dst.Len() == src.Len():
		n := n64(dst)
		s.launch(op, "add_f32", kernels.Problem{N: n}, ptr(p(dst)), ptr(p(dst)), ptr(p(src)), i64(n))
	case trailing(dst.Shape(), src.Shape()):
		cols := dst.Len()
		rows := src.Len() / cols
		s.launch(op, "bias_grad_f32", kernels.Problem{Cols: cols}, ptr(p(dst)), ptr(p(src)), i32(rows), i32(cols), i32(1))
	default:
		s.sumDims(op, dst, src)
	}
}

// sumDims adds src's sums over the dimensions dst lacks or has as 1 into
// dst: the kept dimensions are moved first and the summed ones last, the
// view made contiguous [K, R], and one GEMM with a vector of ones adds
// its row sums into dst.
func (s *state) sumDims(op string, dst, src *tensor.Tensor) {
	sh := src.Shape()
	dpad := append(make([]int, len(sh)-len(dst.Shape())), dst.Shape()...)
	var kept, red []int
	K, R := 1, 1
	for i := range sh {
		if dpad[i] != sh[i] {
			red = append(red, i)
			R *= sh[i]
		} else {
			kept = append(kept, i)
			K *= sh[i]
		}
	}
	if K == 0 || R == 0 {
		return
	}
	m := s.dense(op, src.Permute(append(kept, red...)...))
	ones := s.scratch(op, R)
	backend{}.Fill(ones, 1)
	s.gemm(op, cublas.Gemm{M: K, N: 1, K: R, Alpha: 1, Beta: 1, A: p(m), B: p(ones), C: p(dst), LDA: R, LDB: 1, LDC: 1})
}

// trailing reports whether dst's shape, without its leading ones, is the
// tail of src's: a sum over src's leading dimensions.
func trailing(dst, src []int) bool {
	for len(dst) > 0 && dst[0] == 1 {
		dst = dst[1:]
	}
	if len(dst) > len(src) {
		return false
	}
	return slices.Equal(dst, src[len(src)-len(dst):])
}

// sumAll writes (or adds, with accumulate) Σ src into out[0]: partial
// sums, then one block adding them in a fixed order.
func (s *state) sumAll(op string, out cuda.DevicePtr, src *tensor.Tensor, accumulate bool) {
	s.reduce(op, "reduce_sum_partial_f32", out, src, accumulate)
}

func (s *state) reduce(op, partial string, out cuda.DevicePtr, src *tensor.Tensor, accumulate bool) {
	n := n64(src)
	parts := kernels.ReduceParts(n)
	tmp := s.scratch(op, max(parts, 1))
	if n > 0 {
		s.launch(op, partial, kernels.Problem{N: n}, ptr(p(tmp)), ptr(p(src)), i64(n))
	}
	s.launch(op, "reduce_final", kernels.Problem{}, ptr(out), ptr(p(tmp)), i32(parts), flag(accumulate))
}

// lastAxis runs f on x (and the others) with dim moved last: as they are
// when it is last already, else on contiguous permuted copies, and copies
// f's result back into dst's layout.
func (s *state) lastAxis(op string, dst *tensor.Tensor, dim int, f func(dst *tensor.Tensor, in ...*tensor.Tensor), in ...*tensor.Tensor) {
	nd := len(dst.Shape())
	if dim < 0 {
		dim += nd
	}
	if dim == nd-1 || nd == 0 {
		for i := range in {
			in[i] = s.dense(op, in[i])
		}
		s.into(op, dst, func(d *tensor.Tensor) { f(d, in...) })
		return
	}
	perm, inv := make([]int, 0, nd), make([]int, nd)
	for i := range nd {
		if i != dim {
			perm = append(perm, i)
		}
	}
	perm = append(perm, dim)
	for i, d := range perm {
		inv[d] = i
	}
	for i := range in {
		in[i] = s.dense(op, in[i].Permute(perm...))
	}
	out := s.scratch(op, in[0].Shape()...)
	f(out, in...)
	s.gather(op, dst, out.Permute(inv...))
}

func (be backend) Softmax(dst, x *tensor.Tensor, dim int, log bool) {
	s := stOf(dst)
	if log {
		s.lastAxis("Softmax", dst, dim, func(d *tensor.Tensor, in ...*tensor.Tensor) { s.logSoftmax(d, in[0]) }, x)
		return
	}
	s.lastAxis("Softmax", dst, dim, func(d *tensor.Tensor, in ...*tensor.Tensor) {
		rows, cols := lastDim(in[0])
		s.launch("Softmax", "softmax_fwd", kernels.Problem{Rows: rows, Cols: cols}, ptr(p(d)), ptr(p(in[0])), i32(rows), i32(cols))
	}, x)
}

func (be backend) SoftmaxBackward(dst, y, dy *tensor.Tensor, dim int, log bool) {
	s := stOf(dst)
	if log {
		s.lastAxis("SoftmaxBackward", dst, dim, func(d *tensor.Tensor, in ...*tensor.Tensor) { s.logSoftmaxBackward(d, in[0], in[1]) }, y, dy)
		return
	}
	s.lastAxis("SoftmaxBackward", dst, dim, func(d *tensor.Tensor, in ...*tensor.Tensor) {
		rows, cols := lastDim(in[0])
		s.launch("SoftmaxBackward", "softmax_bwd", kernels.Problem{Rows: rows, Cols: cols}, ptr(p(d)), ptr(p(in[0])), ptr(p(in[1])), i32(rows), i32(cols))
	}, y, dy)
}

// logSoftmax writes x − lse(x) row by row (contiguous, last axis). The
// log-sum-exp comes from the fused classifier run on a copy with every
// target 0: its loss is lse − x[r, 0].
func (s *state) logSoftmax(y, x *tensor.Tensor) {
	const op = "Softmax"
	rows, cols := lastDim(x)
	if rows == 0 {
		return
	}
	x2 := x.Reshape(rows, cols)
	lse := s.scratch(op, rows, 1)
	s.logSumExp(op, lse, x2)
	full := s.dense(op, lse.Expand(rows, cols))
	m := int64(rows * cols)
	s.launch(op, "sub_f32", kernels.Problem{N: m}, ptr(p(y)), ptr(p(x2)), ptr(p(full)), i64(m))
}

// logSumExp writes each row's log Σ e^x of x [rows, cols] (contiguous)
// into lse [rows, 1]: the fused classifier's loss with every target 0 is
// lse − x[r, 0].
func (s *state) logSumExp(op string, lse, x *tensor.Tensor) {
	rows, cols := x.Shape()[0], x.Shape()[1]
	work := s.scratch(op, rows, cols)
	backend{}.Copy(work, x)
	tg := s.uploadI64(op, make([]int64, rows))
	s.launch(op, "fused_classifier_f32", kernels.Problem{Rows: rows}, ptr(p(work)), ptr(p(lse)), ptr(tg.at(0)), i32(rows), i32(cols), f32(1), i64(math.MinInt64))
	first := s.dense(op, x.Narrow(1, 0, 1))
	n := int64(rows)
	s.launch(op, "add_f32", kernels.Problem{N: n}, ptr(p(lse)), ptr(p(lse)), ptr(p(first)), i64(n))
}

// logSoftmaxBackward writes dy − e^y · Σ dy row by row.
func (s *state) logSoftmaxBackward(dx, y, dy *tensor.Tensor) {
	const op = "SoftmaxBackward"
	rows, cols := lastDim(y)
	if rows == 0 {
		return
	}
	sum := s.scratch(op, rows, 1)
	s.sumDims(op, sum, dy.Reshape(rows, cols))
	m := int64(rows * cols)
	e := s.scratch(op, rows, cols)
	s.launch(op, "unary_f32", kernels.Problem{N: m}, ptr(p(e)), ptr(p(y)), i64(m), i32(unaryCodes[tensor.UnaryExp]), f32(0))
	full := s.dense(op, sum.Expand(rows, cols))
	s.launch(op, "mul_f32", kernels.Problem{N: m}, ptr(p(e)), ptr(p(e)), ptr(p(full)), i64(m))
	s.launch(op, "sub_f32", kernels.Problem{N: m}, ptr(p(dx)), ptr(p(dy)), ptr(p(e)), i64(m))
}

// ceCount is how many samples count towards the mean.
func ceCount(target []int64, o tensor.CrossEntropyOptions) int {
	n := 0
	for _, t := range target {
		if !o.Ignore || t != o.IgnoreIndex {
			n++
		}
	}
	return n
}

func ignoreIndex(o tensor.CrossEntropyOptions) int64 {
	if o.Ignore {
		return o.IgnoreIndex
	}
	return math.MinInt64 // no target equals it
}

func (backend) CrossEntropy(loss, prob, logits *tensor.Tensor, target []int64, o tensor.CrossEntropyOptions) {
	const op = "CrossEntropy"
	contig(op, loss, prob, logits)
	s := stOf(loss)
	N, C := logits.Shape()[0], logits.Shape()[1]
	if N == 0 {
		return
	}
	// prob = softmax(logits); the per-row losses from the fused classifier
	// run over a copy of the logits (which it overwrites with dlogits).
	s.launch(op, "softmax_fwd", kernels.Problem{Rows: N, Cols: C}, ptr(p(prob)), ptr(p(logits)), i32(N), i32(C))
	work := s.scratch(op, N, C)
	backend{}.Copy(work, logits)
	losses := loss
	if o.Reduction != tensor.ReduceNone {
		losses = s.scratch(op, N)
	}
	tg := s.uploadI64(op, target)
	s.launch(op, "fused_classifier_f32", kernels.Problem{Rows: N}, ptr(p(work)), ptr(p(losses)), ptr(tg.at(0)), i32(N), i32(C), f32(1), i64(ignoreIndex(o)))
	if eps := o.LabelSmoothing; eps != 0 {
		s.smooth(losses, logits, target, o)
	}
	switch o.Reduction {
	case tensor.ReduceNone:
	case tensor.ReduceSum:
		s.sumAll(op, p(loss), losses, false)
	default: // mean over the samples that count
		s.sumAll(op, p(loss), losses, false)
		if c := ceCount(target, o); c > 0 {
			s.launch(op, "scale_f32", kernels.Problem{N: 1}, ptr(p(loss)), ptr(p(loss)), f32(1/float32(c)), i64(1))
		}
	}
}

// smooth turns the per-row losses nll into (1−ε)·nll + ε·(lse − mean(x))
// for the rows that count (label smoothing, as tensor.CrossEntropy).
func (s *state) smooth(losses, logits *tensor.Tensor, target []int64, o tensor.CrossEntropyOptions) {
	const op = "CrossEntropy"
	N, C := logits.Shape()[0], logits.Shape()[1]
	n := int64(N)
	lse := s.scratch(op, N, 1)
	s.logSumExp(op, lse, logits)
	rs := s.scratch(op, N, 1)
	s.sumDims(op, rs, logits)
	s.launch(op, "axpy_f32", kernels.Problem{N: n}, ptr(p(lse)), f32(float32(-1/float64(C))), ptr(p(rs)), i64(n))
	mask := make([]float32, N)
	for r, t := range target {
		if !o.Ignore || t != o.IgnoreIndex {
			mask[r] = 1
		}
	}
	m := s.scratch(op, N, 1)
	s.htod(op, p(m), unsafePtr(mask), int64(4*N))
	s.launch(op, "mul_f32", kernels.Problem{N: n}, ptr(p(lse)), ptr(p(lse)), ptr(p(m)), i64(n))
	eps := float32(o.LabelSmoothing)
	s.launch(op, "scale_f32", kernels.Problem{N: n}, ptr(p(losses)), ptr(p(losses)), f32(1-eps), i64(n))
	s.launch(op, "axpy_f32", kernels.Problem{N: n}, ptr(p(losses)), f32(eps), ptr(p(lse)), i64(n))
}

func (backend) CrossEntropyBackward(prob, g *tensor.Tensor, target []int64, o tensor.CrossEntropyOptions) {
	const op = "CrossEntropyBackward"
	contig(op, prob, g)
	s := stOf(prob)
	eps := float32(o.LabelSmoothing)
	N, C := prob.Shape()[0], prob.Shape()[1]
	if N == 0 {
		return
	}
	// prob − onehot(target): a scatter-add of −1 at flat positions
	// r·C + target[r], through the embedding gradient's segment kernel
	// (one distinct position per row, so one segment each).
	var order, start, id []int32
	for r, t := range target {
		if o.Ignore && t == o.IgnoreIndex {
			continue
		}
		start = append(start, int32(len(order)))
		order = append(order, int32(len(order)))
		id = append(id, int32(int64(r)*int64(C)+t))
	}
	start = append(start, int32(len(order)))
	if len(id) > 0 {
		ones := s.scratch(op, len(id), 1)
		backend{}.Fill(ones, -(1 - eps))
		s.addSegments(op, prob, ones, order, start, id, 1)
	}
	if eps != 0 { // q's uniform part, ε/C from every element
		n := n64(prob)
		s.launch(op, "unary_f32", kernels.Problem{N: n}, ptr(p(prob)), ptr(p(prob)), i64(n), i32(unaryCodes[tensor.UnaryAddScalar]), f32(-eps/float32(C)))
	}
	for r, t := range target {
		if o.Ignore && t == o.IgnoreIndex {
			row := tensor.FromBuffer(buf(prob), prob.Offset()+r*C, []int{C}, []int{1})
			backend{}.Fill(row, 0)
		}
	}
	n := n64(prob)
	if o.Reduction == tensor.ReduceNone {
		// Each row by its sample's upstream gradient g [N].
		full := s.dense(op, s.dense(op, g).Reshape(N, 1).Expand(N, C))
		s.launch(op, "mul_f32", kernels.Problem{N: n}, ptr(p(prob)), ptr(p(prob)), ptr(p(full)), i64(n))
		return
	}
	// Scale by the upstream gradient (a scalar read back: one sync).
	var gv [1]float32
	backend{}.Download(gv[:], buf(g), g.Offset())
	scale := gv[0]
	if o.Reduction != tensor.ReduceSum {
		if c := ceCount(target, o); c > 0 {
			scale /= float32(c)
		}
	}
	s.launch(op, "scale_f32", kernels.Problem{N: n}, ptr(p(prob)), ptr(p(prob)), f32(scale), i64(n))
}

func (backend) LayerNorm(y, mean, rstd, x, w, b *tensor.Tensor, eps float64) {
	const op = "LayerNorm"
	contig(op, y, mean, rstd, x, w, b)
	s := stOf(y)
	rows, D := lastDim(x)
	if w == nil {
		w = s.scratch(op, D)
		backend{}.Fill(w, 1)
	}
	if b == nil {
		b = s.scratch(op, D) // zeros
	}
	s.launch(op, "layernorm_fwd", kernels.Problem{Rows: rows, Cols: D}, ptr(p(y)), ptr(p(mean)), ptr(p(rstd)), ptr(p(x)), ptr(p(w)), ptr(p(b)), i32(rows), i32(D), f32(float32(eps)))
}

func (backend) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd *tensor.Tensor) {
	const op = "LayerNormBackward"
	contig(op, dx, dw, db, dy, x, w, mean, rstd)
	s := stOf(dx)
	rows, D := lastDim(x)
	if w == nil {
		w = s.scratch(op, D)
		backend{}.Fill(w, 1)
	}
	parts := kernels.LayerNormBwdParts(rows)
	dwp, dbp := s.scratch(op, max(parts, 1), D), s.scratch(op, max(parts, 1), D)
	s.launch(op, "layernorm_bwd", kernels.Problem{Rows: rows, Cols: D}, ptr(p(dx)), ptr(p(dwp)), ptr(p(dbp)), ptr(p(dy)), ptr(p(x)), ptr(p(w)), ptr(p(mean)), ptr(p(rstd)), i32(rows), i32(D), i32(0))
	if dw != nil {
		backend{}.Fill(dw, 0) // the reduce adds
		backend{}.Fill(db, 0)
		s.launch(op, "layernorm_bwd_reduce", kernels.Problem{Cols: D}, ptr(p(dw)), ptr(p(db)), ptr(p(dwp)), ptr(p(dbp)), i32(parts), i32(D))
	}
}

func attDims(qkv *tensor.Tensor, nHead int) (B, T, hd int) {
	sh := qkv.Shape()
	B, T = sh[0], sh[1]
	return B, T, sh[2] / 3 / nHead
}

// Attention runs the flash kernel for y, which keeps each score row's
// log-sum-exp [B, nHead, T] rather than the probabilities: that is the
// state it saves for AttentionBackward (the T×T probabilities are never
// made).
func (be backend) Attention(y, qkv *tensor.Tensor, nHead int, causal bool) *tensor.Tensor {
	const op = "Attention"
	contig(op, y, qkv)
	s := stOf(y)
	B, T, hd := attDims(qkv, nHead)
	lse := tensor.FromBuffer(s.newBuffer(op, B*nHead*T), 0, []int{B, nHead, T}, []int{nHead * T, T, 1})
	if y.Len() == 0 {
		return lse
	}
	s.attentionFwd(op, y, lse, qkv, B, T, nHead, hd, causal)
	return lse
}

func (s *state) attentionFwd(op string, y, lse, qkv *tensor.Tensor, B, T, nHead, hd int, causal bool) {
	s.launch(op, "attention_fwd_f32", kernels.Problem{B: B, T: T, NHead: nHead, HeadDim: hd},
		ptr(p(y)), ptr(p(lse)), ptr(p(qkv)), i32(B), i32(T), i32(nHead), i32(hd), f32(float32(1/math.Sqrt(float64(hd)))), flag(causal))
}

// AttentionBackward recomputes y with the forward kernel (the delta of
// each row, Σ dy·y, needs it; its log-sum-exp goes to scratch) and reads
// the forward pass's saved log-sum-exp.
func (backend) AttentionBackward(dqkv, dy, qkv, saved *tensor.Tensor, nHead int, causal bool) {
	const op = "AttentionBackward"
	contig(op, dqkv, dy, qkv, saved)
	s := stOf(dqkv)
	B, T, hd := attDims(qkv, nHead)
	if saved.Len() != B*nHead*T {
		panic(fmt.Sprintf("cudatensor: %s: saved state of %d elements, want the log-sum-exp [%d, %d, %d]", op, saved.Len(), B, nHead, T))
	}
	d := nHead * hd
	y := s.scratch(op, B, T, d)
	s.attentionFwd(op, y, s.scratch(op, max(B*nHead*T, 1)), qkv, B, T, nHead, hd, causal)
	lse := saved
	delta := s.scratch(op, max(B*nHead*T, 1))
	backend{}.Fill(dqkv, 0)
	scale := f32(float32(1 / math.Sqrt(float64(hd))))
	pb := kernels.Problem{B: B, T: T, NHead: nHead, HeadDim: hd}
	s.launch(op, "attention_bwd_dq_f32", pb, ptr(p(dqkv)), ptr(p(delta)), ptr(p(dy)), ptr(p(y)), ptr(p(qkv)), ptr(p(lse)),
		i32(B), i32(T), i32(nHead), i32(hd), scale, flag(causal))
	s.launch(op, "attention_bwd_dkv_f32", pb, ptr(p(dqkv)), ptr(p(delta)), ptr(p(dy)), ptr(p(qkv)), ptr(p(lse)),
		i32(B), i32(T), i32(nHead), i32(hd), scale, flag(causal))
}

// convDims are a convolution's sizes.
type convDims struct{ N, C, H, W, OC, KH, KW, OH, OW int }

func convOf(x, w *tensor.Tensor, stride, padding int) convDims {
	xs, ws := x.Shape(), w.Shape()
	d := convDims{N: xs[0], C: xs[1], H: xs[2], W: xs[3], OC: ws[0], KH: ws[2], KW: ws[3]}
	d.OH = (d.H+2*padding-d.KH)/stride + 1
	d.OW = (d.W+2*padding-d.KW)/stride + 1
	return d
}

func (d convDims) args(dst, src cuda.DevicePtr, stride, padding int) []arg {
	return []arg{ptr(dst), ptr(src), i32(0), i32(d.N), i32(d.C), i32(d.H), i32(d.W), i32(d.KH), i32(d.KW), i32(stride), i32(padding), i32(d.OH), i32(d.OW)}
}

func (d convDims) problem() kernels.Problem {
	return kernels.Problem{C: d.C, NB: d.N, H: d.H, W: d.W, OH: d.OH, OW: d.OW, KH: d.KH, KW: d.KW}
}

// Conv2d is im2col over the whole batch, col [C·KH·KW, N·OH·OW], then one
// strided-batched GEMM y[n] = w · col[:, n] (and the bias as a rank-one
// product first).
func (backend) Conv2d(y, x, w, b *tensor.Tensor, stride, padding int, act tensor.Activation) {
	const op = "Conv2d"
	contig(op, y, x, w, b)
	s := stOf(y)
	d := convOf(x, w, stride, padding)
	L, K := d.OH*d.OW, d.C*d.KH*d.KW
	if y.Len() == 0 {
		return
	}
	col := s.scratch(op, K, d.N*L)
	s.launch(op, "im2col_f32", d.problem(), d.args(p(col), p(x), stride, padding)...)
	beta := float32(0)
	if b != nil {
		ones := s.scratch(op, L)
		backend{}.Fill(ones, 1)
		s.gemm(op, cublas.Gemm{M: d.OC, N: L, K: 1, Alpha: 1, A: p(b), B: p(ones), C: p(y), LDA: 1, LDB: L, LDC: L,
			StrideC: int64(d.OC * L), Batch: d.N})
		beta = 1
	}
	s.gemm(op, cublas.Gemm{M: d.OC, N: L, K: K, Alpha: 1, Beta: beta, A: p(w), B: p(col), C: p(y), LDA: K, LDB: d.N * L, LDC: L,
		StrideB: int64(L), StrideC: int64(d.OC * L), Batch: d.N})
	if act == tensor.ReLUAct {
		n := n64(y)
		s.launch(op, "relu_fwd_f32", kernels.Problem{N: n}, ptr(p(y)), ptr(p(y)), i64(n))
	}
}

func (backend) Conv2dBackward(dx, dw, db, dy, y, x, w *tensor.Tensor, stride, padding int, act tensor.Activation) {
	const op = "Conv2dBackward"
	contig(op, dx, dw, db, dy, y, x, w)
	s := stOf(dw)
	d := convOf(x, w, stride, padding)
	L, K := d.OH*d.OW, d.C*d.KH*d.KW
	g := dy
	if act == tensor.ReLUAct {
		g = s.scratch(op, dy.Shape()...)
		n := n64(dy)
		s.launch(op, "relu_bwd_f32", kernels.Problem{N: n}, ptr(p(g)), ptr(p(dy)), ptr(p(y)), i64(n))
	}
	// db: the rows of g [N·OC, L] times ones, then the column sums over N.
	ones := s.scratch(op, max(L, 1))
	backend{}.Fill(ones, 1)
	rowSums := s.scratch(op, max(d.N*d.OC, 1))
	if d.N*d.OC > 0 && L > 0 {
		s.gemm(op, cublas.Gemm{M: d.N * d.OC, N: 1, K: L, Alpha: 1, A: p(g), B: p(ones), C: p(rowSums), LDA: L, LDB: 1, LDC: 1})
	}
	if db != nil {
		s.launch(op, "bias_grad_f32", kernels.Problem{Cols: d.OC}, ptr(p(db)), ptr(p(rowSums)), i32(d.N), i32(d.OC), i32(0))
	}
	if d.N == 0 || L == 0 || K == 0 {
		backend{}.Fill(dw, 0)
		return
	}
	col := s.scratch(op, K, d.N*L)
	s.launch(op, "im2col_f32", d.problem(), d.args(p(col), p(x), stride, padding)...)
	// dw = Σ_n g[n] · col[:, n]ᵀ, one GEMM per sample accumulating.
	for n := 0; n < d.N; n++ {
		beta := float32(1)
		if n == 0 {
			beta = 0
		}
		s.gemm(op, cublas.Gemm{TransB: true, M: d.OC, N: K, K: L, Alpha: 1, Beta: beta,
			A: p(g) + cuda.DevicePtr(4*n*d.OC*L), B: p(col) + cuda.DevicePtr(4*n*L), C: p(dw), LDA: L, LDB: d.N * L, LDC: K})
	}
	if dx != nil {
		// dcol[:, n] = wᵀ · g[n], then col2im adds it onto dx.
		dcol := s.scratch(op, K, d.N*L)
		s.gemm(op, cublas.Gemm{TransA: true, M: K, N: L, K: d.OC, Alpha: 1, A: p(w), B: p(g), C: p(dcol), LDA: K, LDB: L, LDC: d.N * L,
			StrideB: int64(d.OC * L), StrideC: int64(L), Batch: d.N})
		backend{}.Fill(dx, 0)
		s.launch(op, "col2im_f32", kernels.Problem{NB: d.N, C: d.C, H: d.H, W: d.W}, d.args(p(dx), p(dcol), stride, padding)...)
	}
}

// pool launches the pooling kernel name with pre ahead of the arguments
// the pooling kernels share: x's planes and size, the output size (y's)
// and the window.
func (s *state) pool(op, name string, pre []arg, x, y *tensor.Tensor, kernel, stride, padding int) {
	xs, ys := x.Shape(), y.Shape()
	pr := kernels.Problem{Planes: xs[0] * xs[1], H: xs[2], W: xs[3], OH: ys[2], OW: ys[3]}
	s.launch(op, name, pr, append(pre, i32(pr.Planes), i32(pr.H), i32(pr.W), i32(pr.OH), i32(pr.OW), i32(kernel), i32(stride), i32(padding))...)
}

func (backend) MaxPool2d(y, x *tensor.Tensor, kernel, stride, padding int) {
	const op = "MaxPool2d"
	contig(op, y, x)
	s := stOf(y)
	argmax := s.scratch(op, max(y.Len(), 1))
	s.pool(op, "maxpool_fwd", []arg{ptr(p(y)), ptr(p(argmax)), ptr(p(x))}, x, y, kernel, stride, padding)
}

// MaxPool2dBackward finds the maxima again from x (the seam keeps no
// indices), then scatters dy through them.
func (backend) MaxPool2dBackward(dx, dy, x *tensor.Tensor, kernel, stride, padding int) {
	const op = "MaxPool2dBackward"
	contig(op, dx, dy, x)
	s := stOf(dx)
	y := s.scratch(op, dy.Shape()...)
	argmax := s.scratch(op, max(y.Len(), 1))
	s.pool(op, "maxpool_fwd", []arg{ptr(p(y)), ptr(p(argmax)), ptr(p(x))}, x, y, kernel, stride, padding)
	s.pool(op, "maxpool_bwd", []arg{ptr(p(dx)), ptr(p(dy)), ptr(p(argmax))}, x, dy, kernel, stride, padding)
}

func (backend) AvgPool2d(y, x *tensor.Tensor, kernel, stride, padding int) {
	const op = "AvgPool2d"
	contig(op, y, x)
	stOf(y).pool(op, "avgpool_fwd", []arg{ptr(p(y)), ptr(p(x))}, x, y, kernel, stride, padding)
}

func (backend) AvgPool2dBackward(dx, dy *tensor.Tensor, kernel, stride, padding int) {
	const op = "AvgPool2dBackward"
	contig(op, dx, dy)
	stOf(dx).pool(op, "avgpool_bwd", []arg{ptr(p(dx)), ptr(p(dy))}, dx, dy, kernel, stride, padding)
}

// IndexRows is the embedding kernel with B = len(idx), T = 1 and a zero
// position table (x + 0 is x).
func (backend) IndexRows(dst, w *tensor.Tensor, idx []int64) {
	const op = "IndexRows"
	s, D := rowOp(op, len(idx), dst, w, w)
	if s == nil {
		return
	}
	zero := s.scratch(op, D)
	ib := s.uploadI64(op, idx)
	s.launch(op, "embedding_fwd", kernels.Problem{B: len(idx), T: 1, Cols: D}, ptr(p(dst)), ptr(ib.at(0)), ptr(p(w)), ptr(p(zero)), i32(len(idx)), i32(1), i32(D))
}

// segments sorts positions by index (a stable counting sort by value):
// order lists the positions, start[g]..start[g+1] those of the g-th
// distinct index id[g].
func segments(idx []int64) (order, start, id []int32) {
	byID := map[int64][]int32{}
	var ids []int64
	for i, v := range idx {
		if _, ok := byID[v]; !ok {
			ids = append(ids, v)
		}
		byID[v] = append(byID[v], int32(i))
	}
	for _, v := range ids {
		start = append(start, int32(len(order)))
		order = append(order, byID[v]...)
		id = append(id, int32(v))
	}
	start = append(start, int32(len(order)))
	return order, start, id
}

func (backend) IndexAddRows(dst *tensor.Tensor, idx []int64, src *tensor.Tensor) {
	const op = "IndexAddRows"
	s, D := rowOp(op, len(idx), dst, src, dst)
	if s == nil {
		return
	}
	order, start, id := segments(idx)
	s.addSegments(op, dst, src, order, start, id, D)
}

// rowOp begins IndexRows or IndexAddRows over n rows: dst and src must be
// contiguous, D is table's row width, and s is dst's stream, nil when
// there is nothing to do.
func rowOp(op string, n int, dst, src, table *tensor.Tensor) (s *state, D int) {
	contig(op, dst, src)
	D = table.Shape()[1]
	if n == 0 || D == 0 {
		return nil, D
	}
	return stOf(dst), D
}

// addSegments queues the embedding gradient's segment kernel: row id[g]
// of dst (D wide) gains the rows order[start[g]:start[g+1]] of src.
func (s *state) addSegments(op string, dst, src *tensor.Tensor, order, start, id []int32, D int) {
	ob, sb, ib := s.uploadI32(op, order), s.uploadI32(op, start), s.uploadI32(op, id)
	s.launch(op, "embedding_bwd_wte", kernels.Problem{Segments: len(id)}, ptr(p(dst)), ptr(p(src)), ptr(ob.at(0)), ptr(sb.at(0)), ptr(ib.at(0)), i32(len(id)), i32(D))
}
