package distributed

import "github.com/cohortml/cohort/distributed/collective"

// Conversions between float32 and the raw 16-bit payloads of BFloat16 and
// Float16 buffers: round to nearest, ties to even (as PyTorch's .half() and
// .bfloat16()), NaN stays NaN, overflow becomes ±Inf. They are the
// roundings the collectives use when they reduce 16-bit buffers, so a
// caller compressing float32 data (DDP's fp16/bf16 hooks) encodes exactly
// as the backend does.

func BF16FromFloat32(f float32) uint16 { return collective.BF16FromFloat32(f) }
func BF16ToFloat32(h uint16) float32   { return collective.BF16ToFloat32(h) }
func FP16FromFloat32(f float32) uint16 { return collective.FP16FromFloat32(f) }
func FP16ToFloat32(h uint16) float32   { return collective.FP16ToFloat32(h) }
