package layout

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tp"
)

// FullStateDictOf gathers, as FullStateDict gathers the parameters,
// tensors shaped like this rank's parameters: vals[i] belongs to
// Parameters()[i] (an optimizer's per-parameter state, say, which is
// sharded as its parameter is). It returns the full tensors by parameter
// name, on every rank. It is a collective op of the mesh.
func (t *Trainer) FullStateDictOf(ctx context.Context, vals []*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	if t.err != nil {
		return nil, t.err
	}
	of, err := t.byParam("FullStateDictOf", vals)
	if err != nil {
		return nil, err
	}
	return t.gather(ctx, func(s tp.Shard) *tensor.Tensor { return of[s.Param] })
}

// LoadFullInto copies this rank's shards of the full tensors in sd (named
// as the model's parameters, e.g. a FullStateDictOf) into vals, where
// vals[i] is shaped like Parameters()[i]. It checks every tensor before
// copying any and needs no communication.
func (t *Trainer) LoadFullInto(sd map[string]*tensor.Tensor, vals []*tensor.Tensor) error {
	of, err := t.byParam("LoadFullInto", vals)
	if err != nil {
		return err
	}
	shards := make([]tp.Shard, len(t.shards))
	for i, s := range t.shards {
		shards[i] = tp.Shard{Name: s.Name, Param: autograd.NewVar(of[s.Param], false), Placement: s.Placement}
	}
	if err := tp.LoadFull(t.comm, shards, sd); err != nil {
		return fmt.Errorf("layout: rank %d: LoadFullInto: %w", t.mesh.Rank(), err)
	}
	return nil
}

// byParam maps each of this rank's parameters to its tensor in vals,
// checking that vals lines up with Parameters().
func (t *Trainer) byParam(op string, vals []*tensor.Tensor) (map[*autograd.Var]*tensor.Tensor, error) {
	if len(vals) != len(t.shards) {
		return nil, fmt.Errorf("layout: rank %d: %s: %d tensors for %d parameters", t.mesh.Rank(), op, len(vals), len(t.shards))
	}
	of := make(map[*autograd.Var]*tensor.Tensor, len(vals))
	for i, s := range t.shards {
		if vals[i] == nil || !vals[i].SameShape(s.Param.Value) {
			var shape []int
			if vals[i] != nil {
				shape = vals[i].Shape()
			}
			return nil, fmt.Errorf("layout: rank %d: %s: tensor %d has shape %v, parameter %s has %v",
				t.mesh.Rank(), op, i, shape, s.Name, s.Param.Value.Shape())
		}
		of[s.Param] = vals[i]
	}
	return of, nil
}
