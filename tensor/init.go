package tensor

import "math/rand/v2"

// Random initialisation. Every generator is passed in explicitly: the same
// seed gives the same values, and nothing reads a global source.

// FillUniform sets every element of t's view to a draw from U[lo, hi).
func (t *Tensor) FillUniform(rng *rand.Rand, lo, hi float32) {
	t.fillFunc(func() float32 { return lo + (hi-lo)*rng.Float32() })
}

// FillNormal sets every element of t's view to a draw from N(mean, std²).
func (t *Tensor) FillNormal(rng *rand.Rand, mean, std float32) {
	t.fillFunc(func() float32 { return mean + std*float32(rng.NormFloat64()) })
}

// fillFunc sets the elements in row-major order to successive values of f.
func (t *Tensor) fillFunc(f func() float32) {
	if t.buf != nil {
		t.notHost("FillUniform/FillNormal") // draws are made on the host: fill there, then move
	}
	l := newLoop(t.shape, t.strides)
	l.rows(t.offset, 0, 0, func(o, _, _, n, s, _, _ int) {
		for i := 0; i < n; i++ {
			t.storage[o+i*s] = f()
		}
	})
}
