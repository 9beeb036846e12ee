// Package tp is tensor (intra-layer) model parallelism as in Megatron-LM
// (Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter Language
// Models Using Model Parallelism", 2019): the weight matrices of a layer
// are split across the ranks of a tensor-parallel group, each rank
// multiplies by its shard, and collectives join the partial results.
//
// The collectives are autograd ops (comm.go), so backward is automatic.
// Megatron's conjugate pair:
//
//	Copy   (f): identity forward, all-reduce (sum) backward
//	Reduce (g): all-reduce (sum) forward, identity backward
//
// and along the last dimension Gather (all-gather forward, keep own chunk
// backward) and Split (keep own chunk forward, all-gather backward).
//
// Layers (layers.go): ColumnParallelLinear splits the output features
// (weight rows), RowParallelLinear the input features (weight columns);
// a column layer followed by a row layer needs one f before and one g
// after. Attention splits the heads (each rank holds whole heads of q, k
// and v), the MLP its hidden features, VocabEmbedding the vocabulary rows,
// and CrossEntropy takes vocabulary-parallel logits, all-reducing the row
// maxima, the sums of exponentials and the target logits (Megatron's
// vocab-parallel cross-entropy). GPT is a tensor-parallel GPT-mini built by
// sharding a models.GPT, so every layout starts from the same weights.
// GPTStage (stage.go) is the part of such a GPT that one pipeline stage
// runs, a pipeline.Stage; package layout composes stages, pipeline and
// data parallelism into dp × pp × tp.
//
// Conventions: a tensor is either replicated (every rank holds the same
// values; its gradient on every rank is the full gradient) or sharded
// (every rank holds its chunk; its gradient is the gradient of that chunk).
// A replicated parameter (LayerNorm, the bias of a row-parallel layer, the
// position embedding) therefore needs no gradient reduction, and a global
// gradient norm counts sharded parameters on every rank and replicated ones
// once (ClipGradNorm).
//
// Errors: layers take a context, which bounds the forward collectives and
// the backward ones recorded with them. A failed collective records the
// first error in the Comm (later collectives of that Comm are skipped, and
// the values are then meaningless); check Comm.Err after Backward, or use
// GPT's methods, which return it. A failed op also breaks the process
// group, so peers fail fast instead of hanging.
package tp
