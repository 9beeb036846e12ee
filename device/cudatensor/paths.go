package cudatensor

// path is how one Backend (or optim.DeviceKernels) method runs on CUDA:
// the kernel table entries it launches, the cuBLAS calls it makes, and
// the forms that have no kernel (which panic naming the op and device).
type path struct {
	kernels []string // device/kernels table names (strided_copy_f32, unary_f32, binary_f32: this package's)
	cublas  []string // cuBLAS calls
	driver  []string // driver calls that are the op (memcpy, memset)
	missing string   // forms without a kernel, "" if none
}

// paths lists every method's implementation path. The tests check it
// against the interfaces (a method without an entry fails), against the
// kernel table (every name exists) and against the launches the code
// makes (run dry, op by op).
var paths = map[string]path{
	"Alloc":    {driver: []string{"cuMemAlloc (through the caching allocator)", "cuMemsetD32Async"}, missing: "bfloat16 buffers"},
	"Release":  {driver: []string{"the caching allocator's Free"}},
	"Upload":   {driver: []string{"cuMemcpyHtoDAsync"}},
	"Download": {driver: []string{"cuMemcpyDtoHAsync"}},
	"Copy":     {kernels: []string{"strided_copy_f32"}, driver: []string{"cuMemcpyDtoDAsync"}, missing: "views of more than 4 dimensions that do not fold"},
	"Fill":     {kernels: []string{"fill_f32", "strided_copy_f32"}},
	"Binary":   {kernels: []string{"add_f32", "sub_f32", "mul_f32", "axpy_f32", "bias_add_f32", "strided_copy_f32", "binary_f32"}, driver: []string{"cuMemcpyDtoDAsync"}},
	"Unary":    {kernels: []string{"scale_f32", "relu_fwd_f32", "gelu_fwd_f32", "strided_copy_f32", "unary_f32"}},

	"ReLUBackward":     {kernels: []string{"relu_bwd_f32"}},
	"GELUTanhBackward": {kernels: []string{"gelu_bwd_f32", "bias_grad_f32"}},
	"Gemm":             {kernels: []string{"scale_f32"}, cublas: []string{"cublasSgemm", "cublasSgemmStridedBatched"}, missing: "batch dimensions that do not fold into one stride"},
	"Linear":           {kernels: []string{"bias_add_f32", "add_f32", "relu_fwd_f32", "gelu_fwd_f32", "fill_f32"}, cublas: []string{"cublasSgemm"}},
	"Sum":              {kernels: []string{"reduce_sum_partial_f32", "reduce_final", "add_f32", "bias_grad_f32", "strided_copy_f32", "fill_f32"}, cublas: []string{"cublasSgemm (row sums against ones)"}},
	"Softmax": {kernels: []string{"softmax_fwd", "strided_copy_f32", "fused_classifier_f32", "add_f32", "sub_f32"},
		driver: []string{"cuMemcpyDtoDAsync", "cuMemcpyHtoDAsync (zero targets)"}},
	"SoftmaxBackward": {kernels: []string{"softmax_bwd", "strided_copy_f32", "fill_f32", "unary_f32", "mul_f32", "sub_f32"},
		cublas: []string{"cublasSgemm (row sums against ones)"}},
	"CrossEntropy": {kernels: []string{"softmax_fwd", "fused_classifier_f32", "reduce_sum_partial_f32", "reduce_final", "scale_f32", "add_f32", "axpy_f32", "mul_f32", "strided_copy_f32", "fill_f32"},
		cublas: []string{"cublasSgemm (row sums, label smoothing)"}, driver: []string{"cuMemcpyDtoDAsync", "cuMemcpyHtoDAsync (targets)"}},
	"CrossEntropyBackward": {kernels: []string{"fill_f32", "embedding_bwd_wte", "scale_f32", "mul_f32", "strided_copy_f32", "unary_f32"}, driver: []string{"cuMemcpyDtoHAsync (the upstream scalar)"}},
	"LayerNorm":            {kernels: []string{"layernorm_fwd", "fill_f32"}},
	"LayerNormBackward":    {kernels: []string{"layernorm_bwd", "layernorm_bwd_reduce", "fill_f32"}, missing: "widths over 1536"},
	"Attention":            {kernels: []string{"attention_fwd_f32"}, missing: "head dimensions over 128"},
	"AttentionBackward":    {kernels: []string{"attention_fwd_f32", "attention_bwd_dq_f32", "attention_bwd_dkv_f32", "fill_f32"}, missing: "head dimensions over 128"},
	"Conv2d":               {kernels: []string{"im2col_f32", "fill_f32", "relu_fwd_f32"}, cublas: []string{"cublasSgemmStridedBatched"}},
	"Conv2dBackward": {kernels: []string{"relu_bwd_f32", "fill_f32", "bias_grad_f32", "im2col_f32", "col2im_f32"},
		cublas: []string{"cublasSgemm", "cublasSgemmStridedBatched"}},
	"MaxPool2d":         {kernels: []string{"maxpool_fwd"}},
	"MaxPool2dBackward": {kernels: []string{"maxpool_fwd", "maxpool_bwd"}},
	"AvgPool2d":         {kernels: []string{"avgpool_fwd"}},
	"AvgPool2dBackward": {kernels: []string{"avgpool_bwd"}},
	"IndexRows":         {kernels: []string{"embedding_fwd"}},
	"IndexAddRows":      {kernels: []string{"embedding_bwd_wte"}},

	"AdamUpdate": {kernels: []string{"adam_step_f32"}},
	"SGDUpdate":  {kernels: []string{"sgd_step_f32"}},
	"GradNorm":   {kernels: []string{"reduce_sumsq_partial_f32", "reduce_final", "unary_f32", "reduce_sum_partial_f32", "binary_f32"}, driver: []string{"cuMemcpyDtoHAsync"}},
}
