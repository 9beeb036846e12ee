package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/tensor"
)

// ErrNonFiniteNorm is returned (wrapped) by ClipGradNorm when the total
// gradient norm is NaN or infinite; the gradients are then left unchanged
// so the caller can skip the step.
var ErrNonFiniteNorm = errors.New("optim: gradient norm is not finite")

// ClipGradNorm scales the gradients of params in place so that their joint
// norm is at most maxNorm, and returns the joint norm before scaling
// (PyTorch's torch.nn.utils.clip_grad_norm_). normType is p > 0 for the
// p-norm (2 is the usual choice) or math.Inf(1) for the largest absolute
// value. Parameters whose Grad is nil are ignored; with none, the norm is 0.
//
// The scale is maxNorm/(norm + 1e-6) clamped to at most 1, applied only
// when below 1. Norms are accumulated in float64.
//
// It returns an error wrapping ErrInvalid for a bad maxNorm or normType,
// and one wrapping ErrNonFiniteNorm (with the norm) when the norm is NaN
// or infinite, in which case no gradient is changed. (PyTorch by default
// scales by the non-finite coefficient, turning every gradient into NaN.)
func ClipGradNorm(params []*autograd.Var, maxNorm, normType float64) (float64, error) {
	const op = "ClipGradNorm"
	if math.IsNaN(maxNorm) || maxNorm < 0 {
		return 0, invalid(op, "maxNorm = %v, want >= 0", maxNorm)
	}
	if !(normType > 0) {
		return 0, invalid(op, "normType = %v, want p > 0 or +Inf", normType)
	}
	var acc float64 // sum of |g|^p, or the max |g| for p = +Inf
	for i, p := range params {
		if p == nil || p.Grad == nil {
			continue
		}
		if !p.Grad.IsContiguous() {
			panic(fmt.Sprintf("optim: ClipGradNorm: parameter %d: grad is a non-contiguous view (shape %v)", i, p.Grad.Shape()))
		}
		if k := deviceKernels(op, p.Grad); k != nil {
			part := k.GradNorm(p.Grad, normType)
			if normType == math.Inf(1) {
				acc = max(acc, part)
			} else {
				acc += part
			}
			continue
		}
		acc = accumulateNorm(acc, p.Grad.Data(), normType)
	}
	total := acc
	switch normType {
	case math.Inf(1):
	case 1:
	case 2:
		total = math.Sqrt(acc)
	default:
		total = math.Pow(acc, 1/normType)
	}
	if math.IsNaN(total) || math.IsInf(total, 0) {
		return total, fmt.Errorf("optim: ClipGradNorm: total %v-norm is %v: %w", normType, total, ErrNonFiniteNorm)
	}
	coef := maxNorm / (total + 1e-6)
	if coef < 1 {
		c := float32(coef)
		for _, p := range params {
			if p == nil || p.Grad == nil {
				continue
			}
			tensor.ScaleInto(p.Grad, p.Grad, c) // vectorised, one rounded product each
		}
	}
	return total, nil
}

// accumulateNorm folds the elements of g into acc (see ClipGradNorm).
// Sums run in four independent float64 lanes so the additions overlap.
func accumulateNorm(acc float64, g []float32, p float64) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	switch p {
	case math.Inf(1):
		for _, x := range g {
			acc = max(acc, math.Abs(float64(x)))
		}
		return acc
	case 2:
		return acc + sumSquares(g)
	case 1:
		for ; i+4 <= len(g); i += 4 {
			s0 += math.Abs(float64(g[i]))
			s1 += math.Abs(float64(g[i+1]))
			s2 += math.Abs(float64(g[i+2]))
			s3 += math.Abs(float64(g[i+3]))
		}
		for ; i < len(g); i++ {
			s0 += math.Abs(float64(g[i]))
		}
	default:
		for _, x := range g {
			s0 += math.Pow(math.Abs(float64(x)), p)
		}
	}
	return acc + (s0 + s1) + (s2 + s3)
}

// sumSquaresGo returns Σ x² in four float64 lanes.
func sumSquaresGo(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		x0, x1, x2, x3 := float64(x[i]), float64(x[i+1]), float64(x[i+2]), float64(x[i+3])
		s0, s1, s2, s3 = s0+x0*x0, s1+x1*x1, s2+x2*x2, s3+x3*x3
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i]) * float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}
