package vec

import (
	"math/rand/v2"
	"testing"
)

// benchPaths runs f once per implementation this machine has.
func benchPaths(b *testing.B, f func(b *testing.B)) { implPaths(b, &useAVX2, "avx2", f) }

// The shapes of the anchor LeNet at batch 64: the second convolution's
// input-gradient fold (10×10 rows in 14-wide planes) and the first
// convolution's 28×28 output pooled 2×2.
func BenchmarkAddRows(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	dst, src := randVals(rng, 14*14), randVals(rng, 14*10)
	benchPaths(b, func(b *testing.B) {
		b.SetBytes(3 * 4 * 10 * 10)
		for b.Loop() {
			AddRows(dst, 14, src, 14, 10, 10)
		}
	})
}

func BenchmarkAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	dst, src := randVals(rng, 4096), randVals(rng, 4096)
	benchPaths(b, func(b *testing.B) {
		b.SetBytes(3 * 4 * 4096)
		for b.Loop() {
			Add(dst, src)
		}
	})
}

func BenchmarkBiasReLU(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	dst, src := make([]float32, 784), randVals(rng, 784)
	benchPaths(b, func(b *testing.B) {
		b.SetBytes(2 * 4 * 784)
		for b.Loop() {
			Bias(dst, src, 0.25, true)
		}
	})
}

func BenchmarkReLUMask(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	dst, g, y := make([]float32, 4096), randVals(rng, 4096), randVals(rng, 4096)
	ReLU(y, y)
	benchPaths(b, func(b *testing.B) {
		b.SetBytes(3 * 4 * 4096)
		for b.Loop() {
			ReLUMask(dst, g, y)
		}
	})
}

func BenchmarkMaxPool2Plane(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	in := randVals(rng, 28*28)
	out, arg := make([]float32, 14*14), make([]int32, 14*14)
	benchPaths(b, func(b *testing.B) {
		b.SetBytes(4 * 28 * 28)
		for b.Loop() {
			MaxPool2Plane(out, arg, in, 14, 14, 28, 0.1, true, true, 28)
		}
	})
}
