package zero

import (
	"github.com/cohortml/cohort/internal/dp/shard"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// stateTargets lists what a rank of a zero Model holds: the full
// parameters and buffers (every rank holds the whole model).
func (m *Model) stateTargets() []shard.ShardTarget {
	var ts []shard.ShardTarget
	for _, np := range m.params {
		ts = append(ts, shard.ShardTarget{Name: np.Name, Shape: np.Param.Value.Shape(), Data: np.Param.Value.Data()})
	}
	for _, nb := range m.buffers {
		ts = append(ts, shard.ShardTarget{Name: nb.Name, Shape: nb.Buffer.Shape(), Data: nb.Buffer.Data()})
	}
	return ts
}

// FullStateDict returns a copy of the full parameters and buffers under
// nn state-dict keys (every rank holds them under ZeRO; no communication).
func (m *Model) FullStateDict() map[string]*tensor.Tensor {
	sd := map[string]*tensor.Tensor{}
	for k, t := range nn.StateDict(m.module) {
		sd[k] = t.Clone()
	}
	return sd
}

// ShardedStateDict returns this rank's part of the model state: for each
// parameter piece in its shard, the piece (aliasing the live values), and
// the buffers as replicated entries. Saved from every rank, the entries
// together cover the model once (plus replicated copies).
func (m *Model) ShardedStateDict() []shard.ShardedTensor {
	var out []shard.ShardedTensor
	for j, pc := range m.pieces {
		np := m.params[pc.Param]
		out = append(out, shard.ShardedTensor{Name: np.Name, Shape: np.Param.Value.Shape(), Offset: pc.Lo, Data: m.shard[j].Param.Value.Data()})
	}
	for i, np := range m.params {
		if m.plan.Offset[i] < 0 {
			out = append(out, shard.ShardedTensor{Name: np.Name, Shape: np.Param.Value.Shape(), Data: np.Param.Value.Data(), Replicated: true})
		}
	}
	for _, nb := range m.buffers {
		out = append(out, shard.ShardedTensor{Name: nb.Name, Shape: nb.Buffer.Shape(), Data: nb.Buffer.Data(), Replicated: true})
	}
	return out
}

// LoadShardedStateDict loads the entries of a sharded state dict saved at
// any world size (every saved rank's entries, or a full state dict as
// entries from FullEntries) into this rank's model. Every rank must load
// the same entries; no communication is needed as every rank holds the
// whole model. Errors name the key.
func (m *Model) LoadShardedStateDict(entries []shard.ShardedTensor) error {
	if err := shard.CheckKeys(nn.StateDict(m.module), entries); err != nil {
		return err
	}
	return shard.LoadShards(m.stateTargets(), entries)
}

// OptimizerShards returns this rank's optimizer state as sharded-state
// entries (see the package function); no communication.
func (m *Model) OptimizerShards() []shard.ShardedTensor {
	return shard.OptimizerShards(m.opt, m.shard, m.pieces, m.shapes())
}

// LoadOptimizerShards loads optimizer state saved by OptimizerShards at
// any world size (every saved rank's entries together).
func (m *Model) LoadOptimizerShards(entries []shard.ShardedTensor) error {
	return shard.LoadOptimizerShards(m.opt, m.shard, m.pieces, m.shapes(), entries)
}

func (m *Model) shapes() [][]int {
	out := make([][]int, len(m.params))
	for i, np := range m.params {
		out[i] = np.Param.Value.Shape()
	}
	return out
}
