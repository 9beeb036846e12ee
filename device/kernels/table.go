package kernels

import (
	"fmt"
	"strings"
)

// Param is one kernel parameter as the CUDA source declares it: its C type
// ("const float*", "long long", "bf16*") and its name.
type Param struct {
	Type, Name string
}

// Geometry is a launch's shape: the grid and block dimensions (x, y, z)
// and the dynamic shared memory in bytes.
type Geometry struct {
	Grid, Block [3]int
	SharedBytes int
}

// Threads is the number of threads in a block.
func (g Geometry) Threads() int { return g.Block[0] * g.Block[1] * g.Block[2] }

// Problem is the size of one launch. Each kernel reads the fields its
// table entry names in Uses and ignores the others.
type Problem struct {
	N          int64 // elements of a flat operand
	Rows, Cols int   // row-wise kernels: Rows rows of Cols (D, or the vocabulary V)
	B, T       int   // batch and sequence length
	NHead      int   // attention heads
	HeadDim    int   // features per head, at most 128
	Segments   int   // embedding_bwd_wte: distinct token ids in the batch
	Parts      int   // reduce_final, layernorm_bwd_reduce: partial sums to add
	Planes     int   // pooling: N·C planes
	C, NB      int   // conv: channels, samples per im2col chunk
	H, W       int   // input height and width (conv, pooling)
	OH, OW     int   // output height and width (conv, pooling)
	KH, KW     int   // conv window
}

// Kernel describes one extern "C" __global__ function: everything a
// runtime needs to load it from its family's module and launch it.
type Kernel struct {
	Name   string  // the function's name in the source and the PTX
	Family string  // the source file, cuda/Family.cu (see Source)
	DType  string  // "f32" or "bf16" for instantiated templates, "" for single-type kernels
	Params []Param // in order, as the source declares them
	Uses   string  // the Problem fields Launch reads
	// Launch gives the geometry for a problem, or an error naming the
	// limit a problem exceeds. A grid with a zero dimension means there
	// is nothing to launch (an empty tensor).
	Launch func(Problem) (Geometry, error)
}

// Launch limits the table's geometries rely on.
const (
	elementwiseThreads = 256
	maxGridX           = 32768 // grid-stride loops: enough blocks to fill any current GPU
	attWarps           = 8     // ATT_WARPS in attention.cu
	attTile            = 32    // ATT_TILE
	MaxHeadDim         = 128   // 32·ATT_MAXR
	lnWarps            = 8     // LN_WARPS in layernorm.cu
	lnBwdWarps         = 4     // LN_BWD_WARPS
	lnBwdMaxBlocks     = 512
	reduceThreads      = 256 // REDUCE_THREADS in reduce.cu
	reduceMaxParts     = 1024
	maxSharedBytes     = 48 << 10 // dynamic shared memory without an opt-in
)

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// flat is the geometry of a grid-stride loop over n elements.
func flat(n int64) Geometry {
	return Geometry{Grid: [3]int{int(min(ceilDiv(n, elementwiseThreads), maxGridX)), 1, 1}, Block: [3]int{elementwiseThreads, 1, 1}}
}

func rowBlocks(rows, threads int) Geometry {
	return Geometry{Grid: [3]int{rows, 1, 1}, Block: [3]int{threads, 1, 1}}
}

// LayerNormBwdParts is the number of partial dw and db rows layernorm_bwd
// writes for rows rows (its grid), which the caller's scratch must hold
// ([parts, D] each) and layernorm_bwd_reduce adds (Problem.Parts).
func LayerNormBwdParts(rows int) int {
	return int(min(ceilDiv(int64(rows), lnBwdWarps), lnBwdMaxBlocks))
}

// ReduceParts is the number of partial sums reduce_sum_partial and
// reduce_sumsq_partial write for n elements (their grid).
func ReduceParts(n int64) int { return int(min(ceilDiv(n, reduceThreads*4), reduceMaxParts)) }

// attentionShared is the dynamic shared memory of the attention kernels:
// two tiles of 32 × (hd + 1) floats, rows of the block's own (each hd),
// and extra floats.
func attentionShared(hd, ownRows, extra int) int {
	return 4 * (2*attTile*(hd+1) + ownRows*attWarps*hd + extra)
}

func attention(shared func(hd int) int) func(Problem) (Geometry, error) {
	return func(p Problem) (Geometry, error) {
		if p.HeadDim < 1 || p.HeadDim > MaxHeadDim {
			return Geometry{}, fmt.Errorf("kernels: attention: head dimension %d, want 1 to %d", p.HeadDim, MaxHeadDim)
		}
		g := Geometry{
			Grid:        [3]int{int(ceilDiv(int64(p.T), attWarps)), p.B * p.NHead, 1},
			Block:       [3]int{32 * attWarps, 1, 1},
			SharedBytes: shared(p.HeadDim),
		}
		if g.Grid[1] > 65535 {
			return Geometry{}, fmt.Errorf("kernels: attention: batch %d × %d heads exceeds the grid's 65535", p.B, p.NHead)
		}
		return g, nil
	}
}

// ps parses a C parameter list ("const float* x", "long long n") into
// Params; see parseParams.
func ps(decl ...string) []Param {
	out := make([]Param, len(decl))
	for i, d := range decl {
		p, err := parseParam(d)
		if err != nil {
			panic(err) // the table's own literals
		}
		out[i] = p
	}
	return out
}

// entry is a table row before instantiation: names ending in "_X" and the
// type floatX expand per DTypes, as in the sources.
type entry struct {
	family, name string
	params       []Param
	uses         string
	launch       func(Problem) (Geometry, error)
}

func noErr(f func(Problem) Geometry) func(Problem) (Geometry, error) {
	return func(p Problem) (Geometry, error) { return f(p), nil }
}

func entries() []entry {
	N := noErr(func(p Problem) Geometry { return flat(p.N) })
	rowsCols := noErr(func(p Problem) Geometry { return flat(int64(p.Rows) * int64(p.Cols)) })
	ew := func(name string, params ...string) entry {
		return entry{"elementwise", name, ps(params...), "N", N}
	}
	pool := func(name string, out bool, params ...string) entry {
		return entry{"pool", name, ps(params...), "Planes, H, W, OH, OW", noErr(func(p Problem) Geometry {
			if out {
				return flat(int64(p.Planes) * int64(p.OH) * int64(p.OW))
			}
			return flat(int64(p.Planes) * int64(p.H) * int64(p.W))
		})}
	}
	poolDims := []string{"int planes", "int H", "int W", "int OH", "int OW", "int k", "int s", "int p"}
	convDims := []string{"int n0", "int nb", "int C", "int H", "int W", "int KH", "int KW", "int stride", "int pad", "int OH", "int OW"}
	attDims := []string{"int B", "int T", "int H", "int hd", "float scale", "int causal"}
	return []entry{
		ew("add_X", "floatX* out", "const floatX* a", "const floatX* b", "long long n"),
		ew("sub_X", "floatX* out", "const floatX* a", "const floatX* b", "long long n"),
		ew("mul_X", "floatX* out", "const floatX* a", "const floatX* b", "long long n"),
		ew("scale_X", "floatX* out", "const floatX* x", "float alpha", "long long n"),
		ew("axpy_X", "floatX* y", "float alpha", "const floatX* x", "long long n"),
		ew("fill_X", "floatX* out", "float v", "long long n"),
		ew("relu_fwd_X", "floatX* out", "const floatX* x", "long long n"),
		ew("relu_bwd_X", "floatX* dx", "const floatX* dy", "const floatX* y", "long long n"),

		{"bias", "bias_add_X", ps("floatX* out", "const floatX* x", "const floatX* bias", "int rows", "int cols"), "Rows, Cols", rowsCols},
		{"bias", "bias_grad_X", ps("float* db", "const floatX* dy", "int rows", "int cols", "int accumulate"), "Cols", noErr(func(p Problem) Geometry {
			return Geometry{Grid: [3]int{int(ceilDiv(int64(p.Cols), 32)), 1, 1}, Block: [3]int{32, 8, 1}}
		})},

		{"gelu", "gelu_fwd_X", ps("floatX* out", "const floatX* x", "long long n"), "N", N},
		{"gelu", "gelu_bwd_X", ps("floatX* dx", "const floatX* dy", "const floatX* x", "long long n"), "N", N},

		{"layernorm", "layernorm_fwd", ps("float* y", "float* mean", "float* rstd", "const float* x", "const float* w", "const float* b", "int rows", "int D", "float eps"),
			"Rows, Cols (D)", noErr(func(p Problem) Geometry {
				return Geometry{Grid: [3]int{int(ceilDiv(int64(p.Rows), lnWarps)), 1, 1}, Block: [3]int{32 * lnWarps, 1, 1}}
			})},
		{"layernorm", "layernorm_bwd", ps("float* dx", "float* dwp", "float* dbp", "const float* dy", "const float* x", "const float* w", "const float* mean", "const float* rstd", "int rows", "int D", "int accumulate"),
			"Rows, Cols (D)", func(p Problem) (Geometry, error) {
				g := Geometry{Grid: [3]int{LayerNormBwdParts(p.Rows), 1, 1}, Block: [3]int{32 * lnBwdWarps, 1, 1}, SharedBytes: 4 * 2 * lnBwdWarps * p.Cols}
				if g.SharedBytes > maxSharedBytes {
					return Geometry{}, fmt.Errorf("kernels: layernorm_bwd: width %d needs %d bytes of shared memory, more than %d", p.Cols, g.SharedBytes, maxSharedBytes)
				}
				return g, nil
			}},
		{"layernorm", "layernorm_bwd_reduce", ps("float* dw", "float* db", "const float* dwp", "const float* dbp", "int parts", "int D"),
			"Cols (D)", noErr(func(p Problem) Geometry {
				return Geometry{Grid: [3]int{int(ceilDiv(int64(p.Cols), 256)), 1, 1}, Block: [3]int{256, 1, 1}}
			})},

		{"softmax", "softmax_fwd", ps("float* y", "const float* x", "int rows", "int cols"), "Rows", noErr(func(p Problem) Geometry { return rowBlocks(p.Rows, 256) })},
		{"softmax", "softmax_bwd", ps("float* dx", "const float* y", "const float* dy", "int rows", "int cols"), "Rows", noErr(func(p Problem) Geometry { return rowBlocks(p.Rows, 256) })},

		{"attention", "attention_fwd_X", ps(append([]string{"floatX* y", "float* lse", "const floatX* qkv"}, attDims...)...),
			"B, T, NHead, HeadDim", attention(func(hd int) int { return attentionShared(hd, 1, 0) })},
		{"attention", "attention_bwd_dq_X", ps(append([]string{"floatX* dqkv", "float* delta", "const floatX* dy", "const floatX* y", "const floatX* qkv", "const float* lse"}, attDims...)...),
			"B, T, NHead, HeadDim", attention(func(hd int) int { return attentionShared(hd, 2, 0) })},
		{"attention", "attention_bwd_dkv_X", ps(append([]string{"floatX* dqkv", "const float* delta", "const floatX* dy", "const floatX* qkv", "const float* lse"}, attDims...)...),
			"B, T, NHead, HeadDim", attention(func(hd int) int { return attentionShared(hd, 2, 2*attTile) })},

		{"embedding", "embedding_fwd", ps("float* out", "const long long* idx", "const float* wte", "const float* wpe", "int B", "int T", "int D"),
			"B, T, Cols (D)", noErr(func(p Problem) Geometry { return flat(int64(p.B) * int64(p.T) * int64(p.Cols)) })},
		{"embedding", "embedding_bwd_wpe", ps("float* dwpe", "const float* dout", "int B", "int T", "int D"),
			"T, Cols (D)", noErr(func(p Problem) Geometry { return flat(int64(p.T) * int64(p.Cols)) })},
		{"embedding", "embedding_bwd_wte", ps("float* dwte", "const float* dout", "const int* order", "const int* seg_start", "const int* seg_id", "int nseg", "int D"),
			"Segments", noErr(func(p Problem) Geometry { return rowBlocks(p.Segments, 256) })},

		{"classifier", "fused_classifier_X", ps("floatX* logits", "float* losses", "const long long* targets", "int rows", "int V", "float dscale", "long long ignore_index"),
			"Rows", noErr(func(p Problem) Geometry { return rowBlocks(p.Rows, 512) })},

		{"reduce", "reduce_sum_partial_X", ps("float* partial", "const floatX* x", "long long n"), "N", noErr(func(p Problem) Geometry { return rowBlocks(ReduceParts(p.N), reduceThreads) })},
		{"reduce", "reduce_sumsq_partial_X", ps("float* partial", "const floatX* x", "long long n"), "N", noErr(func(p Problem) Geometry { return rowBlocks(ReduceParts(p.N), reduceThreads) })},
		{"reduce", "reduce_final", ps("float* out", "const float* partial", "int parts", "int accumulate"), "", noErr(func(Problem) Geometry { return rowBlocks(1, 1024) })},

		{"optim", "adam_step_X", ps("float* param", "const floatX* grad", "float* m", "float* v", "float* vmax", "long long n", "float sign", "float decay", "float l2",
			"float b1", "float c1", "float b2", "float c2", "float bc2_sqrt", "float eps", "float step_size", "int has_l2", "int amsgrad"), "N", N},
		{"optim", "sgd_step_X", ps("float* param", "const floatX* grad", "float* buf", "long long n", "float sign", "float wd", "float mom", "float damp", "float lr",
			"int has_wd", "int momentum", "int nesterov", "int first"), "N", N},
		{"optim", "grad_clip_X", ps("floatX* grad", "long long n", "const float* sumsq", "float max_norm"), "N", N},

		{"conv", "im2col_X", ps(append([]string{"floatX* col", "const floatX* x"}, convDims...)...), "C, NB, KH, KW, OH, OW", noErr(func(p Problem) Geometry {
			return flat(int64(p.C) * int64(p.KH) * int64(p.KW) * int64(p.NB) * int64(p.OH) * int64(p.OW))
		})},
		{"conv", "col2im_X", ps(append([]string{"floatX* dx", "const floatX* col"}, convDims...)...), "NB, C, H, W", noErr(func(p Problem) Geometry {
			return flat(int64(p.NB) * int64(p.C) * int64(p.H) * int64(p.W))
		})},

		pool("maxpool_fwd", true, append([]string{"float* y", "int* argmax", "const float* x"}, poolDims...)...),
		pool("maxpool_bwd", false, append([]string{"float* dx", "const float* dy", "const int* argmax"}, poolDims...)...),
		pool("avgpool_fwd", true, append([]string{"float* y", "const float* x"}, poolDims...)...),
		pool("avgpool_bwd", false, append([]string{"float* dx", "const float* dy"}, poolDims...)...),

		{"cast", "cast_f32_bf16", ps("bf16* out", "const float* x", "long long n"), "N", N},
		{"cast", "cast_bf16_f32", ps("float* out", "const bf16* x", "long long n"), "N", N},
	}
}

// Table returns every kernel, in family order, templated ones once per
// DTypes entry. Each call builds a new slice.
func Table() []Kernel {
	var out []Kernel
	for _, e := range entries() {
		if !strings.HasSuffix(e.name, "_X") {
			out = append(out, Kernel{Name: e.name, Family: e.family, Params: e.params, Uses: e.uses, Launch: e.launch})
			continue
		}
		for _, dt := range DTypes {
			ps := make([]Param, len(e.params))
			for i, p := range e.params {
				ps[i] = Param{Type: typeWord.ReplaceAllLiteralString(p.Type, dt.CType), Name: p.Name}
			}
			out = append(out, Kernel{Name: strings.TrimSuffix(e.name, "_X") + "_" + dt.Name, Family: e.family, DType: dt.Name, Params: ps, Uses: e.uses, Launch: e.launch})
		}
	}
	return out
}

// Lookup returns the kernel named name.
func Lookup(name string) (Kernel, bool) {
	for _, k := range Table() {
		if k.Name == name {
			return k, true
		}
	}
	return Kernel{}, false
}
