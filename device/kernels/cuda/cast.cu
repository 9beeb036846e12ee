// fp32 ↔ bf16 conversions: round to nearest even one way (NaN stays NaN,
// overflow goes to ±Inf, as PyTorch's .to(torch.bfloat16)), exact the
// other. CPU twin: PyTorch's float32 → bfloat16 conversion (tensor has no
// bf16 dtype yet; checkpoint's BF16 decoding widens the same way as
// cast_bf16_f32).

extern "C" __global__ void cast_f32_bf16(bf16* out, const float* x, long long n) {
	GRID_LOOP(i, n) { out[i] = round_bf16(x[i]); }
}

extern "C" __global__ void cast_bf16_f32(float* out, const bf16* x, long long n) {
	GRID_LOOP(i, n) { out[i] = f32(x[i]); }
}
