package wrapcore

import (
	"context"
	"fmt"
	"strings"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/nn"
)

// CheckSameModel checks that every rank of pg holds a model with the same
// parameters and buffers (names, shapes, dtypes, which parameters are
// trainable) and that each can travel through the collectives (non-nil,
// contiguous leaves, none listed twice). On a mismatch the error names the
// first differing rank and what it has where rank 0 has something else.
// Every rank must call it at the same point; it blocks on one small
// all-gather (more only on a mismatch). Every data-parallel wrapper
// (ddp, zero, fsdp) runs it in Wrap; pkg prefixes the errors.
func CheckSameModel(ctx context.Context, pkg string, pg distributed.ProcessGroup, params []nn.NamedParameter, buffers []nn.NamedBuffer) error {
	specs, err := describe(pkg, params, buffers)
	if err != nil {
		return err
	}
	return checkSpecs(ctx, pkg, pg, specs)
}

// describe lists the parameters and buffers for the cross-rank check and
// rejects what the collectives cannot carry.
func describe(pkg string, params []nn.NamedParameter, buffers []nn.NamedBuffer) ([]tensorSpec, error) {
	specs := make([]tensorSpec, 0, len(params)+len(buffers))
	seen := map[*autograd.Var]string{}
	for _, np := range params {
		p := np.Param
		switch {
		case p == nil || p.Value == nil:
			return nil, fmt.Errorf("%s: Wrap: parameter %q is nil", pkg, np.Name)
		case !p.IsLeaf():
			return nil, fmt.Errorf("%s: Wrap: parameter %q is not a leaf", pkg, np.Name)
		case !p.Value.IsContiguous():
			return nil, fmt.Errorf("%s: Wrap: parameter %q is a non-contiguous view (shape %v)", pkg, np.Name, p.Value.Shape())
		}
		if prev, dup := seen[p]; dup {
			return nil, fmt.Errorf("%s: Wrap: parameters %q and %q are the same variable (shared parameters must be listed once)", pkg, prev, np.Name)
		}
		seen[p] = np.Name
		specs = append(specs, tensorSpec{Kind: "parameter", Name: np.Name, Shape: p.Value.Shape(), DType: "float32", Grad: p.RequiresGrad()})
	}
	for _, nb := range buffers {
		switch {
		case nb.Buffer == nil:
			return nil, fmt.Errorf("%s: Wrap: buffer %q is nil", pkg, nb.Name)
		case !nb.Buffer.IsContiguous():
			return nil, fmt.Errorf("%s: Wrap: buffer %q is a non-contiguous view (shape %v)", pkg, nb.Name, nb.Buffer.Shape())
		}
		specs = append(specs, tensorSpec{Kind: "buffer", Name: nb.Name, Shape: nb.Buffer.Shape(), DType: "float32"})
	}
	return specs, nil
}

// checkSpecs compares every rank's description with rank 0's. The common
// case costs one small all-gather; on a mismatch rank 0's full description
// is broadcast so that every rank can name the culprit.
func checkSpecs(ctx context.Context, pkg string, pg distributed.ProcessGroup, specs []tensorSpec) error {
	rank, world := pg.Rank(), pg.Size()
	if world == 1 {
		return nil
	}
	enc := encodeSpecs(specs)
	mine := []int64{int64(len(specs)), specHash(enc), int64(len(enc))}
	all := make([]int64, 3*world)
	if err := pg.AllGather(ctx, distributed.I64(all), distributed.I64(mine)).Wait(); err != nil {
		return fmt.Errorf("%s: Wrap: exchanging model fingerprints: %w", pkg, err)
	}
	same := true
	for r := 1; r < world; r++ {
		if all[3*r] != all[0] || all[3*r+1] != all[1] || all[3*r+2] != all[2] {
			same = false
		}
	}
	if same {
		return nil
	}
	rootLen := int(all[2])
	rootWords := make([]int64, (rootLen+7)/8)
	if rank == 0 {
		copy(rootWords, packBytes(enc))
	}
	if err := pg.Broadcast(ctx, distributed.I64(rootWords), 0).Wait(); err != nil {
		return fmt.Errorf("%s: Wrap: model fingerprints differ; broadcasting rank 0's description: %w", pkg, err)
	}
	root, err := decodeSpecs(unpackBytes(rootWords, rootLen))
	if err != nil {
		return fmt.Errorf("%s: Wrap: model fingerprints differ; rank 0's description: %w", pkg, err)
	}
	at := []int64{int64(firstSpecMismatch(specs, root))}
	ats := make([]int64, world)
	if err := pg.AllGather(ctx, distributed.I64(ats), distributed.I64(at)).Wait(); err != nil {
		return fmt.Errorf("%s: Wrap: model fingerprints differ; exchanging where: %w", pkg, err)
	}
	bad, at0 := -1, -1
	var ranks []string
	for r, i := range ats {
		if i >= 0 {
			if bad < 0 {
				bad, at0 = r, int(i)
			}
			ranks = append(ranks, fmt.Sprintf("rank %d at entry %d", r, i))
		}
	}
	if bad < 0 { // hashes differ but the descriptions match: cannot happen
		return fmt.Errorf("%s: Wrap: model fingerprints differ across ranks %v but the descriptions match", pkg, all)
	}
	// The first differing rank tells everyone what it has there.
	var desc []byte
	if rank == bad {
		desc = []byte(describeAt(specs, at0))
	}
	n := []int64{int64(len(desc))}
	if err := pg.Broadcast(ctx, distributed.I64(n), bad).Wait(); err != nil {
		return fmt.Errorf("%s: Wrap: model differs on rank %d at entry %d; broadcasting its description: %w", pkg, bad, at0, err)
	}
	words := make([]int64, (n[0]+7)/8)
	if rank == bad {
		copy(words, packBytes(desc))
	}
	if err := pg.Broadcast(ctx, distributed.I64(words), bad).Wait(); err != nil {
		return fmt.Errorf("%s: Wrap: model differs on rank %d at entry %d; broadcasting its description: %w", pkg, bad, at0, err)
	}
	return fmt.Errorf("%s: Wrap: model differs across ranks: rank %d has %s where rank 0 has %s (differences: %s)", pkg,
		bad, unpackBytes(words, int(n[0])), describeAt(root, at0), strings.Join(ranks, "; "))
}

// HostOnly refuses a model with a parameter or buffer off the host, for
// the wrappers whose shards and gathers are host memory (zero, fsdp): the
// error names the tensor, its device and the wrapper that runs on devices.
func HostOnly(pkg string, params []nn.NamedParameter, buffers []nn.NamedBuffer) error {
	refuse := func(name string, dev fmt.Stringer) error {
		return fmt.Errorf("%s: Wrap: %q is on %v: %s keeps its shards in host memory (sharding on a device is not built yet; ddp runs on devices)", pkg, name, dev, pkg)
	}
	for _, np := range params {
		if d := np.Param.Value.Device(); !d.IsCPU() {
			return refuse(np.Name, d)
		}
	}
	for _, nb := range buffers {
		if d := nb.Buffer.Device(); !d.IsCPU() {
			return refuse(nb.Name, d)
		}
	}
	return nil
}
