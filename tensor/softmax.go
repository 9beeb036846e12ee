package tensor

import (
	"iter"
	"math"
)

// Softmax along one dimension. The input is viewed as [outer, n, inner]
// with n the softmax dimension; the common last-dimension case (inner 1)
// runs over contiguous rows.

func softmaxDims(name string, x *Tensor, dim int) (d, outer, n, inner int) {
	d = normDim(name, dim, len(x.shape), x.shape)
	outer, inner = 1, 1
	for _, s := range x.shape[:d] {
		outer *= s
	}
	for _, s := range x.shape[d+1:] {
		inner *= s
	}
	return d, outer, x.shape[d], inner
}

// Softmax returns exp(x) normalised to sum 1 along dimension dim, computed
// stably (the maximum is subtracted first). Entries of −∞ get probability 0.
func Softmax(x *Tensor, dim int) *Tensor { return softmax("Softmax", x, dim, false) }

// LogSoftmax returns x − log(Σ exp(x)) along dimension dim, computed stably.
func LogSoftmax(x *Tensor, dim int) *Tensor { return softmax("LogSoftmax", x, dim, true) }

func softmax(name string, x *Tensor, dim int, logOut bool) *Tensor {
	_, outer, n, inner := softmaxDims(name, x, dim)
	if x.buf != nil {
		dev, be := deviceOf(name, x)
		y := NewOn(dev, x.shape...)
		be.Softmax(y, x, dim, logOut)
		return y
	}
	xd := x.Contiguous().Data()
	y := New(x.shape...)
	yd := y.Data()
	for base := range softmaxLanes(outer, n, inner) {
		m := math.Inf(-1)
		for j := 0; j < n; j++ {
			m = math.Max(m, float64(xd[base+j*inner]))
		}
		if math.IsInf(m, -1) {
			m = 0 // every entry −∞: keep the NaN PyTorch gives, not a spurious one
		}
		var s float64
		for j := 0; j < n; j++ {
			s += math.Exp(float64(xd[base+j*inner]) - m)
		}
		if logOut {
			ls := m + math.Log(s)
			for j := 0; j < n; j++ {
				yd[base+j*inner] = float32(float64(xd[base+j*inner]) - ls)
			}
		} else {
			inv := 1 / s
			for j := 0; j < n; j++ {
				yd[base+j*inner] = float32(math.Exp(float64(xd[base+j*inner])-m) * inv)
			}
		}
	}
	return y
}

// SoftmaxBackward returns dx = y·(dy − Σ dy·y) along dim, given Softmax's
// output y and the output gradient dy.
func SoftmaxBackward(y, dy *Tensor, dim int) *Tensor {
	return softmaxBackward("SoftmaxBackward", y, dy, dim, false)
}

// LogSoftmaxBackward returns dx = dy − exp(y)·Σ dy along dim, given
// LogSoftmax's output y and the output gradient dy.
func LogSoftmaxBackward(y, dy *Tensor, dim int) *Tensor {
	return softmaxBackward("LogSoftmaxBackward", y, dy, dim, true)
}

func softmaxBackward(name string, y, dy *Tensor, dim int, logOut bool) *Tensor {
	if !y.SameShape(dy) {
		panicf("%s: output shape %v and gradient shape %v differ", name, y.shape, dy.shape)
	}
	_, outer, n, inner := softmaxDims(name, y, dim)
	if y.buf != nil || dy.buf != nil {
		dev, be := deviceOf(name, y, dy)
		dx := NewOn(dev, y.shape...)
		be.SoftmaxBackward(dx, y, dy, dim, logOut)
		return dx
	}
	yd := y.Contiguous().Data()
	gd := dy.Contiguous().Data()
	dx := New(y.shape...)
	dd := dx.Data()
	for base := range softmaxLanes(outer, n, inner) {
		var s float64
		for j := 0; j < n; j++ {
			k := base + j*inner
			if logOut {
				s += float64(gd[k])
			} else {
				s += float64(gd[k]) * float64(yd[k])
			}
		}
		for j := 0; j < n; j++ {
			k := base + j*inner
			if logOut {
				dd[k] = float32(float64(gd[k]) - math.Exp(float64(yd[k]))*s)
			} else {
				dd[k] = float32(float64(yd[k]) * (float64(gd[k]) - s))
			}
		}
	}
	return dx
}

// softmaxLanes yields the first flat index of each of the outer×inner
// lanes that softmax runs along: n elements, inner apart.
func softmaxLanes(outer, n, inner int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for o := 0; o < outer; o++ {
			for i := 0; i < inner; i++ {
				if !yield(o*n*inner + i) {
					return
				}
			}
		}
	}
}
