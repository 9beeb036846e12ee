package zero

import (
	"github.com/cohortml/cohort/internal/dp/shard"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// The shard plan and sharded state every sharded wrapper shares (zero,
// fsdp), under zero's names.

// Align is the alignment, in elements, of every parameter slot and every
// shard in a shard plan's flat buffer.
const Align = shard.Align

// Plan lays buckets of parameters out in one flat buffer and splits every
// bucket into World equal contiguous shards, one per rank (see
// Model.Plan).
type Plan = shard.Plan

// Bucket is one bucket of a Plan.
type Bucket = shard.Bucket

// Piece is the part of one parameter in a rank's shard.
type Piece = shard.Piece

// ShardedTensor is one rank's part of a named tensor of a sharded state
// dict (ShardedStateDict, OptimizerShards).
type ShardedTensor = shard.ShardedTensor

// Memory is what one rank keeps resident for training, in bytes.
type Memory = shard.Memory

// PlanShards lays out buckets of parameters (numel[i] elements for
// parameter i; buckets lists parameter indices) for world ranks.
func PlanShards(numel []int, buckets [][]int, world int) (Plan, error) {
	return shard.PlanShards(numel, buckets, world)
}

// FullEntries turns a full state dict into sharded-state entries (each
// tensor whole), for LoadShardedStateDict.
func FullEntries(sd map[string]*tensor.Tensor) []ShardedTensor { return shard.FullEntries(sd) }

// OptimizerBytes returns the bytes of an optimizer's state tensors.
func OptimizerBytes(opt optim.Optimizer) int64 { return shard.OptimizerBytes(opt) }
