package cudatensor

import (
	_ "embed"
	"fmt"

	"github.com/cohortml/cohort/device/kernels"
	"github.com/cohortml/cohort/tensor"
)

// stridedSource holds this package's kernels, those device/kernels does
// not have: the strided copy behind views, and the elementwise ops the
// conformance suite covers but no model needs (division, max, min, exp,
// log, …). They belong in device/kernels when it takes them.
//
//go:embed strided.cu
var stridedSource string

const stridedFamily = "cudatensor_strided"

// maxStridedDims is the most dimensions strided_copy_f32 takes.
const maxStridedDims = 4

var localKernels = []kernels.Kernel{{
	Name: "strided_copy_f32", Family: stridedFamily, DType: "f32", Uses: "N",
	Params: []kernels.Param{{Type: "float*", Name: "out"}, {Type: "const float*", Name: "x"}, {Type: "long long", Name: "n"},
		{Type: "int", Name: "d0"}, {Type: "int", Name: "d1"}, {Type: "int", Name: "d2"}, {Type: "int", Name: "d3"},
		{Type: "long long", Name: "t0"}, {Type: "long long", Name: "t1"}, {Type: "long long", Name: "t2"}, {Type: "long long", Name: "t3"},
		{Type: "long long", Name: "u0"}, {Type: "long long", Name: "u1"}, {Type: "long long", Name: "u2"}, {Type: "long long", Name: "u3"}},
	Launch: flatLaunch,
}, {
	Name: "unary_f32", Family: stridedFamily, DType: "f32", Uses: "N", Launch: flatLaunch,
	Params: []kernels.Param{{Type: "float*", Name: "out"}, {Type: "const float*", Name: "x"}, {Type: "long long", Name: "n"},
		{Type: "int", Name: "op"}, {Type: "float", Name: "c"}},
}, {
	Name: "binary_f32", Family: stridedFamily, DType: "f32", Uses: "N", Launch: flatLaunch,
	Params: []kernels.Param{{Type: "float*", Name: "out"}, {Type: "const float*", Name: "a"}, {Type: "const float*", Name: "b"},
		{Type: "long long", Name: "n"}, {Type: "int", Name: "op"}},
}}

// flatLaunch is a grid-stride loop's geometry over N elements.
func flatLaunch(p kernels.Problem) (kernels.Geometry, error) {
	return kernels.Geometry{Grid: [3]int{int(min((p.N+255)/256, 32768)), 1, 1}, Block: [3]int{256, 1, 1}}, nil
}

// lookup finds a kernel in device/kernels' table or this package's.
func lookup(name string) (kernels.Kernel, bool) {
	if k, ok := kernels.Lookup(name); ok {
		return k, true
	}
	for _, k := range localKernels {
		if k.Name == name {
			return k, true
		}
	}
	return kernels.Kernel{}, false
}

// source returns a family's CUDA C.
func source(family string) (string, error) {
	if family == stridedFamily {
		return stridedSource, nil
	}
	return kernels.Source(family)
}

// gather copies the view src into the view dst of its shape.
func (s *state) gather(op string, dst, src *tensor.Tensor) {
	sh, st, ut := src.Shape(), src.Strides(), dst.Strides()
	if len(sh) > maxStridedDims {
		// Fold neighbouring dimensions that are contiguous with each other
		// in both views.
		var fs, ft, fu []int
		for i := range sh {
			if n := len(fs); n > 0 && ft[n-1] == st[i]*sh[i] && fu[n-1] == ut[i]*sh[i] {
				fs[n-1] *= sh[i]
				ft[n-1], fu[n-1] = st[i], ut[i]
				continue
			}
			fs, ft, fu = append(fs, sh[i]), append(ft, st[i]), append(fu, ut[i])
		}
		sh, st, ut = fs, ft, fu
	}
	if len(sh) > maxStridedDims {
		missing(op, dst.Device(), fmt.Sprintf("a copy of %d dimensions that do not fold to %d (shape %v, strides %v into %v)", len(src.Shape()), maxStridedDims, src.Shape(), src.Strides(), dst.Strides()))
	}
	d, t, u := [maxStridedDims]int{1, 1, 1, 1}, [maxStridedDims]int{}, [maxStridedDims]int{}
	off := maxStridedDims - len(sh)
	for i := range sh {
		d[off+i], t[off+i], u[off+i] = sh[i], st[i], ut[i]
	}
	n := n64(dst)
	if n == 0 {
		return
	}
	s.launch(op, "strided_copy_f32", kernels.Problem{N: n}, ptr(p(dst)), ptr(p(src)), i64(n),
		i32(d[0]), i32(d[1]), i32(d[2]), i32(d[3]), i64(int64(t[0])), i64(int64(t[1])), i64(int64(t[2])), i64(int64(t[3])),
		i64(int64(u[0])), i64(int64(u[1])), i64(int64(u[2])), i64(int64(u[3])))
}

// into runs f on a contiguous stand-in for dst when dst is a strided
// view, then copies the result into dst.
func (s *state) into(op string, dst *tensor.Tensor, f func(d *tensor.Tensor)) {
	if dst.IsContiguous() {
		f(dst)
		return
	}
	c := s.scratch(op, dst.Shape()...)
	f(c)
	s.gather(op, dst, c)
}

// dense returns t when it is contiguous, else a contiguous copy of it on
// the device.
func (s *state) dense(op string, t *tensor.Tensor) *tensor.Tensor {
	if t == nil || t.IsContiguous() {
		return t
	}
	c := s.scratch(op, t.Shape()...)
	s.gather(op, c, t)
	return c
}
