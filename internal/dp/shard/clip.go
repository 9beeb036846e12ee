package shard

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
)

// CheckClip rejects a maxNorm or normType ClipShardNorm cannot use; pkg
// prefixes the error.
func CheckClip(pkg string, maxNorm, normType float64) error {
	if !(maxNorm >= 0) || (normType != 2 && !math.IsInf(normType, 1)) {
		return fmt.Errorf("%s: ClipGradNorm: maxNorm %v, normType %v (want maxNorm >= 0 and normType 2 or +Inf)", pkg, maxNorm, normType)
	}
	return nil
}

// ClipShardNorm is a wrapper's ClipGradNorm over the shard variables of any sharded
// wrapper (their Grads hold this rank's averaged gradient pieces; the
// pieces of all ranks together cover the gradient once).
func ClipShardNorm(ctx context.Context, pkg string, pg distributed.ProcessGroup, shard []nn.NamedParameter, maxNorm, normType float64) (float64, error) {
	if err := CheckClip(pkg, maxNorm, normType); err != nil {
		return 0, err
	}
	inf := math.IsInf(normType, 1)
	vars := make([]*autograd.Var, len(shard))
	for j, s := range shard {
		vars[j] = s.Param
	}
	// optim's norm kernel over this rank's pieces (no scaling with an
	// infinite maxNorm); a non-finite local norm still takes part in the
	// exchange, so that no rank is left waiting.
	local, err := optim.ClipGradNorm(vars, math.Inf(1), normType)
	if err != nil && !errors.Is(err, optim.ErrNonFiniteNorm) {
		local = math.NaN()
	}
	if !inf {
		local *= local // back to the sum of squares
	}
	all := []float64{local}
	if world := pg.Size(); world > 1 {
		all = make([]float64, world)
		if err := pg.AllGather(ctx, distributed.F64(all), distributed.F64([]float64{local})).Wait(); err != nil {
			return 0, fmt.Errorf("%s: ClipGradNorm: exchanging partial norms: %w", pkg, err)
		}
	}
	var total float64
	for _, v := range all { // rank order: the same sum on every rank
		if inf {
			total = max(total, v)
		} else {
			total += v
		}
	}
	if !inf {
		total = math.Sqrt(total)
	}
	if math.IsNaN(total) || math.IsInf(total, 0) {
		return total, fmt.Errorf("%s: ClipGradNorm: total norm is %v; gradients left unchanged: %w", pkg, total, optim.ErrNonFiniteNorm)
	}
	if coef := maxNorm / (total + 1e-6); coef < 1 {
		c := float32(coef)
		for _, s := range shard {
			d := s.Param.Grad.Data()
			for i := range d {
				d[i] *= c
			}
		}
	}
	return total, nil
}
