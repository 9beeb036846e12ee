//go:build !amd64

package optim

func sgdKernel(param, grad, buf []float32, c *sgdConsts, first bool) {
	sgdGo(param, grad, buf, c, first)
}

func adamKernel(param, grad, m, v, vmax []float32, c *adamConsts) { adamGo(param, grad, m, v, vmax, c) }

func sumSquares(x []float32) float64 { return sumSquaresGo(x) }
