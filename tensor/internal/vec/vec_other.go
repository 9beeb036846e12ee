//go:build !amd64

package vec

var (
	useAVX2   = false
	useAVX512 = false
)

func addAVX2(dst, src *float32, n int)                                       { panic("unreachable") }
func sumRowsAVX2(dst, src *float32, stride, rows, cols int)                  { panic("unreachable") }
func addRowsAVX2(dst *float32, ds int, src *float32, ss int, rows, cols int) { panic("unreachable") }
func biasAVX2(dst, src *float32, n int, bias float32, flags int)             { panic("unreachable") }
func reluMaskAVX2(dst, grad, y *float32, n int)                              { panic("unreachable") }

func convTileAVX512(k int, a *float32, offs *int, x, c *float32, ldc, rows int, nmask uint64) {
	panic("unreachable")
}

func dot4x6AVX512(n, m int, a0, a1, a2, a3, b0, b1, b2, b3, b4, b5 *float32, aStride, bStride int, acc *float32) {
	panic("unreachable")
}

func maxPool2PlaneAVX2(dst *float32, arg *int32, src *float32, rows, cols, stride int, bias float32, flags, w int) {
	panic("unreachable")
}

func maxPool2Plane4AVX2(dst *float32, arg *int32, src *float32, rows, cols, stride int, bias float32, flags, w int) {
	panic("unreachable")
}

var hasFMA = false

func expAVX2(dst, src *float32, n int)                                         { panic("unreachable") }
func expShiftSumAVX2(dst, src *float32, n int, scale, shift float32) float32   { panic("unreachable") }
func geluTanhAVX2(dst, src *float32, n int)                                    { panic("unreachable") }
func geluTanhGradAVX2(dst, grad, x *float32, n int)                            { panic("unreachable") }
func softmaxGradAVX2(ds, p *float32, n int, dot, scale float32)                { panic("unreachable") }
func expAVX512(dst, src *float32, n int)                                       { panic("unreachable") }
func expShiftSumAVX512(dst, src *float32, n int, scale, shift float32) float32 { panic("unreachable") }
func geluTanhAVX512(dst, src *float32, n int)                                  { panic("unreachable") }
func softmaxRowsAVX512(s *float32, T int, causal bool)                         { panic("unreachable") }
func softmaxGradRowsAVX512(ds, p *float32, T int, causal bool, scale float32)  { panic("unreachable") }
func geluTanhGradAVX512(dst, grad, x *float32, n int)                          { panic("unreachable") }
func maxAVX2(src *float32, n int) float32                                      { panic("unreachable") }
func dotAVX2(a, b *float32, n int) float32                                     { panic("unreachable") }
func scaleAVX2(dst, src *float32, n int, a float32)                            { panic("unreachable") }

func layerNormRowAVX2(dst, src, w, b *float32, n int, invN, eps float32, stats *float32) {
	panic("unreachable")
}

func layerNormGradRowAVX2(dx, grad, x, w, dw, db *float32, n int, mean, rstd, invN float32) {
	panic("unreachable")
}

func layerNormRows2AVX2(dst, src, w, b *float32, n int, invN, eps float32, stats *float32) {
	panic("unreachable")
}

func layerNormGradRows2AVX2(dx, grad, x, w, dw, db *float32, n int, mean0, rstd0, mean1, rstd1, invN float32) {
	panic("unreachable")
}
