package fsdp

import (
	"github.com/cohortml/cohort/internal/dp/shard"
	"github.com/cohortml/cohort/tensor"
)

// The shard plan and sharded state every sharded wrapper shares (zero,
// fsdp): the same types as zero's.

// OptimizerFunc builds the optimizer over this rank's shard variables.
type OptimizerFunc = shard.OptimizerFunc

// Plan lays the units' parameters out in one flat buffer and splits every
// unit's bucket into equal contiguous shards, one per rank.
type Plan = shard.Plan

// ShardedTensor is one rank's part of a named tensor of a sharded state
// dict (ShardedStateDict, OptimizerShards).
type ShardedTensor = shard.ShardedTensor

// Memory is what one rank keeps resident for training, in bytes.
type Memory = shard.Memory

// FullEntries turns a full state dict into sharded-state entries (each
// tensor whole), for LoadShardedStateDict.
func FullEntries(sd map[string]*tensor.Tensor) []ShardedTensor { return shard.FullEntries(sd) }
