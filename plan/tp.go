package plan

import (
	"fmt"
	"math"
)

// TPRun is what a tensor-parallel run of a model measured, per step of
// one microbatch on one rank (cohort plan validate's profile times a
// tensor-parallel GPT's forward and backward, and each collective as its
// caller waits for it).
type TPRun struct {
	// ComputeSeconds is the forward and backward's time outside the
	// collectives, per step.
	ComputeSeconds float64
	// CollectiveSeconds is the mean time of an activation all-reduce
	// (CollectiveBytes each); SmallSeconds that of the loss's small
	// all-reduces (SmallBytes each, their mean size).
	CollectiveSeconds, SmallSeconds float64
	CollectiveBytes, SmallBytes     int64
}

// MeasureTP returns the figures that make e's prediction of layout l (pure
// tensor parallelism, one microbatch) give back what run measured: the
// compute over the compute that e's device predicts without
// tensor-parallel figures (its curve, its side-by-side factor and the
// cores' share), and each collective's time beyond the fabric's for its
// size.
func MeasureTP(e *Env, l Layout, run TPRun) (TPPoint, error) {
	if l.TP < 2 || l.PP != 1 || l.Microbatches != 1 {
		return TPPoint{}, fmt.Errorf("plan: profile: tensor parallelism: layout %v: want tp ≥ 2, pp 1 and one microbatch", l)
	}
	if !(run.ComputeSeconds > 0) || !(run.CollectiveSeconds >= 0) || !(run.SmallSeconds >= 0) || math.IsInf(run.ComputeSeconds+run.CollectiveSeconds+run.SmallSeconds, 0) {
		return TPPoint{}, fmt.Errorf("plan: profile: tensor parallelism: measured compute %v s, collectives %v s and %v s: want compute > 0 and finite times ≥ 0",
			run.ComputeSeconds, run.CollectiveSeconds, run.SmallSeconds)
	}
	bare := *e.Device
	bare.TensorParallel = nil
	env := *e
	env.Device = &bare
	p, err := Predict(&env, l)
	if err != nil {
		return TPPoint{}, err
	}
	g := Group{PerNode: l.TP, Nodes: 1}
	return TPPoint{
		Ranks:             l.TP,
		Compute:           run.ComputeSeconds / p.Times.Compute,
		CollectiveSeconds: max(0, run.CollectiveSeconds-e.Fabric.AllReduceTime(g, float64(run.CollectiveBytes))),
		SmallSeconds:      max(0, run.SmallSeconds-e.Fabric.AllReduceTime(g, float64(run.SmallBytes))),
	}, nil
}
