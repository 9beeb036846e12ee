package cudatensor

import "github.com/cohortml/cohort/tensor"

// The op codes of unary_f32 and binary_f32 (the U_ and B_ constants of
// strided.cu).
var (
	unaryCodes = map[tensor.UnaryOp]int{
		tensor.UnaryExp: 1, tensor.UnaryLog: 2, tensor.UnarySqrt: 3, tensor.UnaryTanh: 4, tensor.UnarySigmoid: 5,
		tensor.UnaryAbs: 6, tensor.UnaryGELU: 7, tensor.UnarySiLU: 8, tensor.UnarySquare: 9, tensor.UnaryAddScalar: 10,
		tensor.UnaryPow: 11,
	}
	binaryCodes = map[tensor.BinaryOp]int{tensor.BinaryDiv: 1, tensor.BinaryMax: 2, tensor.BinaryMin: 3}
)
