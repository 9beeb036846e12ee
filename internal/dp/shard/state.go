package shard

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// ShardedTensor is one rank's part of a named tensor of a sharded state
// dict: the full tensor's shape and name (the nn state-dict key) and the
// elements [Offset, Offset+len(Data)) of its row-major data. Replicated
// entries (buffers, frozen parameters) hold the whole tensor on every
// rank; a writer needs only one rank's copy.
type ShardedTensor struct {
	Name       string
	Shape      []int
	Offset     int
	Data       []float32
	Replicated bool
}

// ShardTarget is a part of a tensor to be filled by LoadShards.
type ShardTarget struct {
	Name  string
	Shape []int
	Lo    int       // first element of the part in the full tensor
	Data  []float32 // the part's destination
}

// LoadShards fills every target from the entries of a sharded state dict
// saved at any world size (all ranks' entries together): each target's
// elements must be covered by entries of the same name and shape. On a
// missing key, a shape mismatch, an entry outside its tensor or elements
// no entry covers it returns an error naming the key and changes nothing.
func LoadShards(targets []ShardTarget, entries []ShardedTensor) error {
	byName := map[string][]ShardedTensor{}
	for _, e := range entries {
		n := 1
		for _, d := range e.Shape {
			n *= d
		}
		if e.Offset < 0 || e.Offset+len(e.Data) > n {
			return fmt.Errorf("shard: sharded state: key %q: elements [%d,%d) outside shape %v", e.Name, e.Offset, e.Offset+len(e.Data), e.Shape)
		}
		byName[e.Name] = append(byName[e.Name], e)
	}
	type copyOp struct {
		dst, src []float32
	}
	var ops []copyOp
	for _, t := range targets {
		es, ok := byName[t.Name]
		if !ok {
			return fmt.Errorf("shard: sharded state: missing key %q", t.Name)
		}
		covered := 0
		for _, e := range es {
			if !slices.Equal(e.Shape, t.Shape) {
				return fmt.Errorf("shard: sharded state: key %q has shape %v, the model %v", t.Name, e.Shape, t.Shape)
			}
			lo, hi := max(t.Lo, e.Offset), min(t.Lo+len(t.Data), e.Offset+len(e.Data))
			if lo < hi {
				ops = append(ops, copyOp{t.Data[lo-t.Lo : hi-t.Lo], e.Data[lo-e.Offset : hi-e.Offset]})
				covered += hi - lo
			}
		}
		if covered < len(t.Data) { // overlapping entries may cover more
			return fmt.Errorf("shard: sharded state: key %q: elements [%d,%d) needed, the entries cover %d of them", t.Name, t.Lo, t.Lo+len(t.Data), covered)
		}
	}
	for _, op := range ops {
		copy(op.dst, op.src)
	}
	return nil
}

// FullEntries turns a full state dict into sharded-state entries (each
// tensor whole), for LoadShardedStateDict.
func FullEntries(sd map[string]*tensor.Tensor) []ShardedTensor {
	out := make([]ShardedTensor, 0, len(sd))
	for _, k := range sortedTensorKeys(sd) {
		t := sd[k].Contiguous()
		out = append(out, ShardedTensor{Name: k, Shape: t.Shape(), Data: t.Data(), Replicated: true})
	}
	return out
}

// CheckKeys rejects entries naming tensors that the model, whose state
// dict keys are those of sd, does not have (a state dict of another
// model). Entries under "optim." (OptimizerShards') are not the model's
// and are skipped, so one list may carry both.
func CheckKeys[T any](sd map[string]T, entries []ShardedTensor) error {
	seen := map[string]bool{}
	var unexpected []string
	for _, e := range entries {
		if _, ok := sd[e.Name]; !ok && !seen[e.Name] && !strings.HasPrefix(e.Name, "optim.") {
			seen[e.Name] = true
			unexpected = append(unexpected, fmt.Sprintf("%q", e.Name))
		}
	}
	if len(unexpected) > 0 {
		return fmt.Errorf("shard: sharded state: unexpected keys %s (a state dict of another model?)", strings.Join(unexpected, ", "))
	}
	return nil
}

// OptimizerShards returns the state of a shard optimizer (built over
// shard, the pieces of plan's parameters on this rank) as sharded-state
// entries that load at any world size: for each state buffer b of the
// piece of parameter P, an entry "optim.P.b" with P's full shape and the
// piece's range, aliasing the live state; and a replicated entry
// "optim.step" holding the number of updates (equal for every piece of a
// model whose parameters all receive gradients). The optimizer's other
// scalars (learning rates, betas) are configuration and not included.
func OptimizerShards(opt optim.Optimizer, shard []nn.NamedParameter, pieces []Piece, shapes [][]int) []ShardedTensor {
	sd := opt.StateDict()
	var out []ShardedTensor
	var step float64
	for j, pc := range pieces {
		pre := "state." + strconv.Itoa(j) + "."
		for _, k := range sortedTensorKeys(sd.Tensors) {
			if b, ok := strings.CutPrefix(k, pre); ok {
				out = append(out, ShardedTensor{Name: "optim." + shard[j].Name + "." + b, Shape: shapes[pc.Param], Offset: pc.Lo, Data: sd.Tensors[k].Data()})
			}
		}
		step = max(step, sd.Scalars[pre+"step"])
	}
	return append(out, ShardedTensor{Name: "optim.step", Shape: []int{1}, Data: []float32{float32(step)}, Replicated: true})
}

// LoadOptimizerShards loads entries made by OptimizerShards at any world
// size into opt, the shard optimizer over shard (the pieces of this rank).
// Every piece's state buffers must be covered and the optimizer kind's
// buffers must match; errors name the key, and nothing changes on an
// error.
func LoadOptimizerShards(opt optim.Optimizer, shard []nn.NamedParameter, pieces []Piece, shapes [][]int, entries []ShardedTensor) error {
	sd := opt.StateDict()
	fresh := &optim.StateDict{Kind: sd.Kind, Tensors: map[string]*tensor.Tensor{}, Scalars: map[string]float64{}}
	for k, v := range sd.Scalars {
		fresh.Scalars[k] = v
	}
	var targets []ShardTarget
	for j, pc := range pieces {
		pre := "state." + strconv.Itoa(j) + "."
		for _, k := range sortedTensorKeys(sd.Tensors) {
			if b, ok := strings.CutPrefix(k, pre); ok {
				t := tensor.New(sd.Tensors[k].Shape()...)
				fresh.Tensors[k] = t
				targets = append(targets, ShardTarget{Name: "optim." + shard[j].Name + "." + b, Shape: shapes[pc.Param], Lo: pc.Lo, Data: t.Data()})
			}
		}
	}
	step := -1.0
	for _, e := range entries {
		if e.Name == "optim.step" && len(e.Data) == 1 {
			step = float64(e.Data[0])
		}
	}
	if step < 0 {
		return fmt.Errorf("shard: optimizer shards: missing key %q", "optim.step")
	}
	if err := LoadShards(targets, entries); err != nil {
		return err
	}
	for j := range pieces {
		fresh.Scalars["state."+strconv.Itoa(j)+".step"] = step
	}
	if err := opt.LoadStateDict(fresh); err != nil {
		return fmt.Errorf("shard: optimizer shards: %w", err)
	}
	return nil
}

func sortedTensorKeys(m map[string]*tensor.Tensor) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
