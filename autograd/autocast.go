package autograd

import (
	"github.com/cohortml/cohort/tensor"
)

// Autocast sets the dtype of the matrix products that read the given
// leaves (a model's parameters), PyTorch's torch.autocast("cpu",
// dtype=torch.bfloat16) on them, and returns a function that sets them
// back to float32:
//
//	defer autograd.Autocast(tensor.BFloat16, params...)()
//
// Like NoGrad the state lives on the leaves, not in a global switch. An
// op's output carries the widest autocast dtype of its inputs, so
// everything computed from an autocast parameter is in the autocast
// region: Linear and its fused forms, MatMul, Conv2d and its fused forms,
// Attention and AttentionQKV then run their products, forward and
// backward, in bfloat16 with float32 accumulation (tensor.GemmAs states
// the bound), while every value, every gradient and every other op
// (softmax, norms, losses, reductions, the optimizer) stays float32. The
// parameters remain float32 master weights receiving float32 gradients,
// so wrappers that reduce or shard gradients see nothing change.
//
// A linear op rounds its weight and its input once in the forward pass
// and keeps both rounded copies for the backward products, and rounds the
// output gradient once for both of those, in storage reused from step to
// step (tensor.Half). Nothing is cached across an optimizer step, so a
// parameter written by the optimizer, a checkpoint load or a gather is
// never read stale. (Rounding inside the products' packing instead, as
// gemm.GemmMixed does for MatMul and the convolutions, measured 8-25 %
// slower per GPT-mini step: it rounds the input and the gradient twice.) Device tensors run
// their products in float32 (the GPU backends have no autocast path
// yet). dt is tensor.Float32 or tensor.BFloat16; Float32 undoes it.
func Autocast(dt tensor.DType, vars ...*Var) (restore func()) {
	if dt != tensor.Float32 && dt != tensor.BFloat16 {
		panic("autograd: Autocast: dtype " + dt.String() + ": want float32 or bfloat16")
	}
	type prev struct {
		v  *Var
		dt tensor.DType
	}
	var set []prev
	for _, v := range vars {
		if v.IsLeaf() && v.autocast != dt {
			set = append(set, prev{v, v.autocast})
			v.autocast = dt
		}
	}
	return func() {
		for _, p := range set {
			p.v.autocast = p.dt
		}
		set = nil
	}
}

// AutocastDType returns the dtype v's products run in (see Autocast).
func (v *Var) AutocastDType() tensor.DType { return v.autocast }

// castOf returns the dtype of a product reading the given vars on dev:
// the widest autocast dtype among them on the host, float32 on a device.
func castOf(dev tensor.Device, vars ...*Var) tensor.DType {
	dt := tensor.Float32
	for _, v := range vars {
		if v != nil && v.autocast > dt {
			dt = v.autocast
		}
	}
	if !dev.IsCPU() {
		return tensor.Float32
	}
	return dt
}

// halfInto delivers op(a)·op(b) ([rows, cols], bfloat16 operands) as input
// i's gradient, accumulating straight into the leaf's Grad when the sink
// allows it (as gemmInto).
func halfInto(s *sink, i int, a *tensor.Half, ta bool, b *tensor.Half, tb bool, rows, cols int) {
	if dst, overwrite := s.into(i); dst != nil {
		beta := float32(1)
		if overwrite {
			beta = 0
		}
		tensor.GemmHalf(dst.Reshape(rows, cols), a, ta, b, tb, 1, beta)
		s.settle(i)
		return
	}
	d := tensor.Empty(rows, cols)
	tensor.GemmHalf(d, a, ta, b, tb, 1, 0)
	s.add(i, d, true)
}
