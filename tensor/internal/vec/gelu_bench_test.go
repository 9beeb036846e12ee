package vec

import "testing"

func BenchmarkGELUTanhGrad(b *testing.B) {
	for _, n := range []int{4096, 1 << 20} {
		x, g, d := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = float32(i%200-100) * 0.03
			g[i] = 1
		}
		m := NewMath(false)
		b.Run("grad", func(b *testing.B) {
			b.SetBytes(int64(n * 4))
			for range b.N {
				m.GELUTanhGrad(d, g, x)
			}
		})
		b.Run("fwd", func(b *testing.B) {
			b.SetBytes(int64(n * 4))
			for range b.N {
				m.GELUTanh(d, x)
			}
		})
	}
}
