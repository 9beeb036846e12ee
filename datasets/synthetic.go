package datasets

import (
	"fmt"
	"math"

	"github.com/cohortml/cohort/data"
)

// maxSyntheticElems bounds a synthetic dataset (4 GiB of float32).
const maxSyntheticElems = 1 << 30

// Synthetic is a seeded random classification dataset: N samples of Shape
// with standard-normal features and labels uniform in [0, Classes).
//
// It draws exactly what PyTorch draws for
//
//	g = torch.Generator(); g.manual_seed(seed)
//	X = torch.randn(N, *Shape, generator=g)
//	Y = torch.randint(0, Classes, (N,), generator=g)
//
// — the synthetic MNIST-shaped data of the benchmark anchors with N=60000,
// Shape=[784], Classes=10, seed 1234. Labels match PyTorch exactly; X
// matches to about 1e-6 (PyTorch's vectorised kernel evaluates log, sin
// and cos in single precision, Synthetic in double).
//
// It is immutable and safe for concurrent use.
type Synthetic struct {
	X       []float32
	Labels  []int64
	Shape   []int
	Classes int
}

var _ data.Dataset = (*Synthetic)(nil)

// NewSynthetic returns n samples of the given shape and classes drawn from
// seed (see Synthetic).
func NewSynthetic(n int, shape []int, classes int, seed uint64) (*Synthetic, error) {
	per := 1
	for _, d := range shape {
		if d < 1 {
			return nil, fmt.Errorf("datasets: synthetic: bad sample shape %v", shape)
		}
		per *= d
		if per > maxSyntheticElems {
			return nil, fmt.Errorf("datasets: synthetic: sample shape %v too large", shape)
		}
	}
	if n < 0 || n > maxSyntheticElems/per {
		return nil, fmt.Errorf("datasets: synthetic: %d samples of %v is outside [0, %d] elements", n, shape, maxSyntheticElems)
	}
	if classes < 1 || classes > math.MaxUint32 {
		return nil, fmt.Errorf("datasets: synthetic: %d classes, want 1..2^32-1", classes)
	}
	g := data.NewMT19937(seed)
	s := &Synthetic{X: make([]float32, n*per), Labels: make([]int64, n), Shape: append([]int(nil), shape...), Classes: classes}
	torchRandn(s.X, g)
	for i := range s.Labels {
		s.Labels[i] = int64(g.Uint32() % uint32(classes))
	}
	return s, nil
}

// Len returns the number of samples.
func (s *Synthetic) Len() int { return len(s.Labels) }

// Get returns sample i (a view of X).
func (s *Synthetic) Get(i int) (data.Sample, error) {
	if err := data.ErrIndex(i, s.Len()); err != nil {
		return data.Sample{}, fmt.Errorf("datasets: synthetic: %w", err)
	}
	per := len(s.X) / max(len(s.Labels), 1)
	return data.Sample{X: s.X[i*per : (i+1)*per : (i+1)*per], Shape: s.Shape, Labels: s.Labels[i : i+1 : i+1]}, nil
}

// torchRandn fills x with standard normals the way PyTorch 1.13 fills a
// contiguous float tensor of at least 16 elements (aten normal_fill): x
// first receives uniforms u = (Uint32() & (2^24−1))·2^−24, then every block
// of 16 is turned into normals by Box–Muller, x[j] = r·cos θ and
// x[j+8] = r·sin θ with r = √(−2 ln(1−x[j])) and θ = 2π·x[j+8], j < 8.
// When len(x) is not a multiple of 16 the last 16 elements are redrawn
// and transformed again. Fewer than 16 elements take PyTorch's scalar
// path: one Box–Muller pair from two 53-bit uniforms per two elements.
func torchRandn(x []float32, g *data.MT19937) {
	n := len(x)
	if n < 16 {
		// at::normal_distribution<double>: u1, u2 are 53-bit uniforms from
		// random64(); r = √(−2·ln(1−u2)), θ = 2π·u1; it returns r·cos θ and
		// keeps r·sin θ for the next draw.
		for i := 0; i < n; i += 2 {
			u1, u2 := uniform53(g), uniform53(g)
			r := math.Sqrt(-2 * math.Log1p(-u2))
			theta := 2 * math.Pi * u1
			x[i] = float32(r * math.Cos(theta))
			if i+1 < n {
				x[i+1] = float32(r * math.Sin(theta))
			}
		}
		return
	}
	for i := range x {
		x[i] = uniform24(g)
	}
	for i := 0; i+16 <= n; i += 16 {
		boxMuller16(x[i : i+16])
	}
	if n%16 != 0 {
		tail := x[n-16:]
		for i := range tail {
			tail[i] = uniform24(g)
		}
		boxMuller16(tail)
	}
}

func uniform24(g *data.MT19937) float32 {
	return float32(g.Uint32()&(1<<24-1)) * (1.0 / (1 << 24))
}

func uniform53(g *data.MT19937) float64 {
	hi, lo := uint64(g.Uint32()), uint64(g.Uint32())
	return float64((hi<<32|lo)&(1<<53-1)) * (1.0 / (1 << 53))
}

func boxMuller16(d []float32) {
	for j := range 8 {
		u1 := 1 - d[j] // (0, 1] for the log
		u2 := d[j+8]
		r := math.Sqrt(-2 * math.Log(float64(u1)))
		theta := 2 * math.Pi * float64(u2)
		d[j] = float32(r * math.Cos(theta))
		d[j+8] = float32(r * math.Sin(theta))
	}
}
