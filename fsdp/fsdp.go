package fsdp

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/reducer"
	"github.com/cohortml/cohort/internal/dp/shard"
	"github.com/cohortml/cohort/internal/dp/wrapcore"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// Options configures Wrap. Optimizer is required.
type Options struct {
	// Optimizer builds this rank's optimizer over its parameter pieces
	// (see OptimizerFunc); one built on the full parameters is an
	// error.
	Optimizer OptimizerFunc
	// NoPrefetch turns off gathering the next unit while the current one
	// runs its forward pass.
	NoPrefetch bool
	// PrefetchAcrossSteps makes Step start gathering the root and the
	// first unit for the next Call; they are then held between steps
	// (Memory counts them).
	PrefetchAcrossSteps bool
	// FindUnusedParameters lets a synchronised backward leave parameters
	// without a gradient (they contribute zero).
	FindUnusedParameters bool
	// KeepAfterForward keeps every unit's gathered parameters from its
	// forward pass to its backward pass (PyTorch FSDP's
	// reshard_after_forward=False): each unit gets a buffer of its own
	// instead of one of two shared slots, so the backward pass gathers
	// nothing again. One all-gather per unit per step instead of about
	// two, DDP's traffic in all; the price is that during a step a rank
	// holds the whole model's parameters (between steps still 1/N).
	KeepAfterForward bool
	// FreeBuffers frees the buffers of gathered parameters (the root and
	// the two unit slots) and of full gradients after every backward
	// pass, so that between steps a rank holds 1/N of everything; each
	// step then allocates (zeroes or faults in, and later collects) them
	// afresh. By default they are kept and reused (Memory.BufferBytes):
	// the slots and the root, which every step holds at its peak anyway,
	// and gradient buffers up to the root's and the three largest units'
	// size, each reused once its reduce-scatter is done.
	FreeBuffers bool
}

// Model is a module whose parameters, gradients and optimizer state are
// sharded across a process group. Create it with Wrap; drive it from one
// goroutine: Call, Backward, optionally ClipGradNorm, Step, ZeroGrad.
type Model struct {
	module      nn.Module
	pg          distributed.ProcessGroup
	o           Options
	rank, world int

	params []nn.NamedParameter
	shapes [][]int
	units  [][]int // parameter indices of each unit; the last is the root
	plan   Plan
	pieces []shard.Piece
	shard  []nn.NamedParameter
	opt    optim.Optimizer
	red    *reducer.Reducer

	// Invariants: shardParam and shardGrad hold this rank's shard of every
	// bucket (bucket k = unit len(units)−2−k for k < len(units)−1, then
	// the root). Between steps every sharded parameter's Value is
	// placeholder[i] (no elements) and its Grad nil, except under NoSync,
	// where stash[i] accumulates the local gradient.
	shardParam []float32
	shardGrad  []float32
	// gradUnset[k]: bucket k's gradient shard holds no gradient since
	// ZeroGrad, whatever its contents; the next reduce-scatter writes over
	// it, and a reader before that clears it (settleGrads).
	gradUnset   []bool
	placeholder []*tensor.Tensor
	stash       []*tensor.Tensor
	views       []*tensor.Tensor // during a synchronised step: the Grad each parameter should have
	scratch     [][]float32
	bufs        wrapcore.Buffers // unit gradient buffers kept for reuse
	core        wrapcore.Core    // hooks, their error, NoSync, finishing a step

	// Gathered parameters (gather.go). Invariants: the root's full values
	// are in rootBuf from Call to the end of the backward pass; unit u's
	// are in slots[u%len(slots)] (two slots, or one per unit under
	// KeepAfterForward), a buffer as large as the largest unit it serves;
	// gt (slots.go) knows which unit each slot holds and which gathers
	// (rootWork, slotWork[s]) are in flight. The forward graph's closures
	// see a unit's parameters only through its slot: backward re-gathers
	// the unit into the same slot before its gradients are computed.
	gt        *slotTable
	gatherCtx context.Context // the context of the table's gathers, during a call into it
	rootBuf   []float32
	rootWork  distributed.Work
	slots     [][]float32
	slotCap   []int
	slotWork  []distributed.Work
	unitOf    []int  // per parameter: its unit (the root is len(units)−1), −1 if not sharded
	ready     []int  // per unit: trainable parameters whose gradient is final in this pass
	nReady    int    // the sum of ready
	inBack    bool   // the backward pass has reached a unit
	entered   []bool // per unit: its backward began in this pass (reenter)
	gen       int    // counts Calls; a unit's backward checks it runs on the latest graph

	ctx         context.Context
	heldPeak    int64 // most gathered parameter bytes held at once since the last Call
	gatherBytes int64 // parameter bytes all-gathered so far (traffic accounting)
}

var _ nn.Module = (*Model)(nil)

// Wrap shards model across pg in units: units[u] is a submodule (a layer,
// a transformer block) whose parameters are gathered together just in
// time for its forward pass; parameters in no unit form a root unit held
// for the whole forward pass. Every rank must call Wrap with the same
// model and units; it checks the models agree (as ddp.Wrap does),
// shards rank 0's parameters, and builds this rank's optimizer. After
// Wrap the module's trainable parameters hold no values between steps:
// use Call to run it and FullStateDict to read it.
func Wrap(ctx context.Context, model nn.Module, units []nn.Module, pg distributed.ProcessGroup, o Options) (*Model, error) {
	if model == nil || pg == nil {
		return nil, errors.New("fsdp: Wrap: nil model or process group")
	}
	if o.Optimizer == nil {
		return nil, errors.New("fsdp: Wrap: Options.Optimizer is nil (a function building the optimizer over this rank's shard)")
	}
	m := &Model{module: model, pg: pg, o: o, rank: pg.Rank(), world: pg.Size()}
	m.params = model.NamedParameters()
	if err := wrapcore.HostOnly("fsdp", m.params, model.NamedBuffers()); err != nil {
		return nil, err
	}
	if err := wrapcore.CheckSameModel(ctx, "fsdp", pg, m.params, model.NamedBuffers()); err != nil {
		return nil, fmt.Errorf("fsdp: %w", err)
	}
	index := map[*autograd.Var]int{}
	for i, np := range m.params {
		index[np.Param] = i
	}
	owner := make([]int, len(m.params))
	for i := range owner {
		owner[i] = -1
	}
	for u, sub := range units {
		var ids []int
		for _, np := range sub.NamedParameters() {
			i, ok := index[np.Param]
			if !ok {
				return nil, fmt.Errorf("fsdp: Wrap: unit %d's parameter %q is not a parameter of the model", u, np.Name)
			}
			if owner[i] >= 0 {
				return nil, fmt.Errorf("fsdp: Wrap: parameter %q is in units %d and %d (a parameter shared between units belongs in the root: leave it out of both)", m.params[i].Name, owner[i], u)
			}
			owner[i] = u
			if np.Param.RequiresGrad() {
				ids = append(ids, i)
			}
		}
		m.units = append(m.units, ids)
	}
	var root []int
	for i, np := range m.params {
		if owner[i] < 0 && np.Param.RequiresGrad() {
			root = append(root, i)
		}
	}
	m.units = append(m.units, root)
	// Buckets in the order gradients become ready: last unit first, the
	// root (embeddings, often used again at the end) last.
	var buckets [][]int
	for u := len(m.units) - 2; u >= 0; u-- {
		buckets = append(buckets, m.units[u])
	}
	buckets = append(buckets, root)
	numel := make([]int, len(m.params))
	m.shapes = make([][]int, len(m.params))
	for i, np := range m.params {
		numel[i] = np.Param.Value.Len()
		m.shapes[i] = np.Param.Value.Shape()
	}
	var err error
	if m.plan, err = shard.PlanShards(numel, buckets, m.world); err != nil {
		return nil, err
	}
	if err := m.shardParams(ctx); err != nil {
		return nil, err
	}
	if m.red, err = reducer.New(len(m.params), buckets, (*reducerIO)(m), true); err != nil {
		return nil, fmt.Errorf("fsdp: Wrap: %w", err)
	}
	if m.opt, err = shard.BuildOptimizer("fsdp", o.Optimizer, m.params, m.shapes, m.shard, m.rank, ""); err != nil {
		return nil, err
	}
	for i, np := range m.params { // release the full values
		if m.plan.Offset[i] >= 0 {
			m.placeholder[i] = placeholder(m.shapes[i])
			np.Param.Value, np.Param.Grad = m.placeholder[i], nil
		}
	}
	m.initGather()
	m.core = wrapcore.Core{Pkg: "fsdp", Params: m.params, Red: m.red}
	m.core.Hook(m.onReady)
	return m, nil
}

// bucketOfUnit maps a unit to its bucket.
func (m *Model) bucketOfUnit(u int) int {
	if u == len(m.units)-1 {
		return u
	}
	return len(m.units) - 2 - u
}

// shardParams copies rank 0's values of this rank's shard out of the
// full parameters and replaces the parameters' values by placeholders.
func (m *Model) shardParams(ctx context.Context) error {
	p := m.plan
	full := make([]float32, p.Len())
	for i, np := range m.params {
		if off := p.Offset[i]; off >= 0 {
			copy(full[off:], np.Param.Value.Data())
		}
	}
	if m.world > 1 {
		if err := m.pg.Broadcast(ctx, distributed.F32(full), 0).Wait(); err != nil {
			return fmt.Errorf("fsdp: Wrap: broadcast from rank 0: %w", err)
		}
		// Frozen parameters and buffers stay whole: copy rank 0's.
		for i, np := range m.params {
			if p.Offset[i] < 0 {
				if err := m.pg.Broadcast(ctx, distributed.F32(np.Param.Value.Data()), 0).Wait(); err != nil {
					return fmt.Errorf("fsdp: Wrap: broadcast of %q from rank 0: %w", np.Name, err)
				}
			}
		}
		for _, nb := range m.module.NamedBuffers() {
			if err := m.pg.Broadcast(ctx, distributed.F32(nb.Buffer.Data()), 0).Wait(); err != nil {
				return fmt.Errorf("fsdp: Wrap: broadcast of buffer %q from rank 0: %w", nb.Name, err)
			}
		}
	}
	m.shardParam = wrapcore.AlignedFloats(p.ShardLen())
	m.shardGrad = wrapcore.AlignedFloats(p.ShardLen())
	m.gradUnset = make([]bool, len(p.Buckets))
	for k := range m.gradUnset {
		m.gradUnset[k] = true // (zero) no gradient yet
	}
	if !m.o.FreeBuffers {
		// The root's gradient buffer, armed for the whole backward pass,
		// and the three largest units': the unit in backward, the one
		// before it and one reduce-scatter in flight.
		last := len(p.Buckets) - 1 // the root
		sizes := make([]int, last)
		for k, b := range p.Buckets[:last] {
			sizes[k] = b.End - b.Start
		}
		slices.Sort(sizes)
		m.bufs.Limit = p.Buckets[last].End - p.Buckets[last].Start
		for _, n := range sizes[max(0, len(sizes)-3):] {
			m.bufs.Limit += n
		}
	}
	for k, b := range p.Buckets {
		lo, hi := b.ShardRange(m.rank)
		copy(m.shardParam[p.ShardOffset(k):], full[lo:hi])
	}
	m.placeholder = make([]*tensor.Tensor, len(m.params))
	m.stash = make([]*tensor.Tensor, len(m.params))
	m.views = make([]*tensor.Tensor, len(m.params))
	m.scratch = make([][]float32, len(p.Buckets))
	m.pieces = p.Pieces(m.rank)
	m.shard = make([]nn.NamedParameter, len(m.pieces))
	for j, pc := range m.pieces {
		at := m.local(pc)
		v := autograd.NewVar(tensor.FromSlice(m.shardParam[at:at+pc.Len], pc.Len), true)
		v.Grad = tensor.FromSlice(m.shardGrad[at:at+pc.Len], pc.Len)
		m.shard[j] = nn.NamedParameter{Name: m.params[pc.Param].Name, Param: v}
	}
	return nil
}

// local returns where piece pc lives in this rank's shard buffers.
func (m *Model) local(pc shard.Piece) int {
	lo, _ := m.plan.Buckets[pc.Bucket].ShardRange(m.rank)
	return m.plan.ShardOffset(pc.Bucket) + pc.Flat - lo
}

// placeholder returns a tensor of the given shape backed by one element
// (a broadcast view): what a released parameter's Value is, so that
// autograd's shape checks pass while no values are held. Reading its data
// is a programming error (the parameter is released).
func placeholder(shape []int) *tensor.Tensor {
	ones := make([]int, len(shape))
	for i := range ones {
		ones[i] = 1
	}
	return tensor.New(ones...).Expand(shape...)
}

// SequentialUnits makes every layer of s that has parameters a unit and
// returns the units and, for an input x, the forward function Call takes.
// The forward function runs s's layers in order; each unit runs through
// Units.Run together with the parameterless layers that follow it (its
// activation, a pooling layer), as one nn.Sequential, so that the fused
// runs s.Forward uses (Linear+ReLU, Conv2d+ReLU+MaxPool2d) are fused under
// fsdp too. Layers before the first unit run outside any unit.
func SequentialUnits(s *nn.Sequential) (units []nn.Module, forward func(x *autograd.Var) func(*Units) *autograd.Var) {
	runs := sequentialRuns(s)
	for _, r := range runs {
		if r.unit >= 0 {
			units = append(units, r.seq.Layers[0])
		}
	}
	return units, func(x *autograd.Var) func(*Units) *autograd.Var {
		return func(u *Units) *autograd.Var {
			for i, r := range runs {
				switch {
				case r.unit < 0:
					x = r.seq.Forward(x)
				case i+1 < len(runs):
					x = u.Run(r.unit, x, func(x *autograd.Var) *autograd.Var {
						y := r.seq.Forward(x)
						// Read only by the next run (through the unit's
						// marker, which shares its value), as inside a
						// Sequential: its storage is reused after backward.
						autograd.Transient(y)
						return y
					})
				default:
					x = u.Run(r.unit, x, r.seq.Forward)
				}
			}
			return x
		}
	}
}

// layerRun is a run of a Sequential's layers: a unit (a layer with
// parameters) and the parameterless layers after it, or (unit −1) the
// parameterless layers before the first unit.
type layerRun struct {
	unit int
	seq  *nn.Sequential
}

func sequentialRuns(s *nn.Sequential) []layerRun {
	var runs []layerRun
	units := 0
	for _, l := range s.Layers {
		if len(l.NamedParameters()) > 0 {
			runs = append(runs, layerRun{units, nn.NewSequential(l)})
			units++
			continue
		}
		if len(runs) == 0 {
			runs = append(runs, layerRun{-1, nn.NewSequential()})
		}
		last := runs[len(runs)-1].seq
		last.Layers = append(last.Layers, l)
	}
	return runs
}
