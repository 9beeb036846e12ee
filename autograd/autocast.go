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
// A linear op rounds its weight once per forward pass and keeps the
// rounded copy for the input gradient's product, in storage reused from
// step to step (tensor.Half); activations and gradients are rounded by
// the products themselves, block by block as they pack them (gemm's
// GemmMixed), so no rounded copy of them is ever written. Nothing is
// cached across an optimizer step, so a parameter written by the
// optimizer, a checkpoint load or a gather is never read stale. Device tensors run
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

// gemmIntoAs is gemmInto with the product in dt (tensor.GemmAs).
func gemmIntoAs(dt tensor.DType, s *sink, i int, a, b *tensor.Tensor) {
	if dt == tensor.Float32 {
		gemmInto(s, i, a, b)
		return
	}
	if dst, overwrite := s.into(i); dst != nil {
		beta := float32(1)
		if overwrite {
			beta = 0
		}
		tensor.GemmAs(dt, dst.Reshape(a.Dim(0), b.Dim(1)), a, b, 1, beta)
		s.settle(i)
		return
	}
	d := tensor.Empty(a.Dim(0), b.Dim(1))
	tensor.GemmAs(dt, d, a, b, 1, 0)
	s.add(i, d, true)
}
