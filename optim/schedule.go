package optim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
)

// Schedule is a learning-rate schedule in closed form: a pure function of
// the step, so that resuming, sharding or replaying never depends on the
// history of calls.
type Schedule interface {
	// LR returns the learning rate at step (0 for the first optimizer
	// step) of a group whose initial learning rate is base; it must be
	// finite and >= 0 (SetLR panics otherwise).
	LR(base float64, step int) float64
	// Validate reports a bad field, naming it.
	Validate() error
}

// StepLR multiplies the learning rate by Gamma every StepSize steps:
// base·Gamma^⌊step/StepSize⌋ (torch.optim.lr_scheduler.StepLR).
type StepLR struct {
	StepSize int     // >= 1
	Gamma    float64 // >= 0; PyTorch's default is 0.1
}

func (s StepLR) LR(base float64, step int) float64 {
	return base * math.Pow(s.Gamma, float64(step/s.StepSize))
}

func (s StepLR) Validate() error {
	if s.StepSize < 1 {
		return invalid("StepLR", "StepSize = %d, want >= 1", s.StepSize)
	}
	return checkHyper("StepLR", "Gamma", s.Gamma)
}

// CosineAnnealingLR follows half a cosine from base down to EtaMin over
// TMax steps: EtaMin + (base − EtaMin)·(1 + cos(π·step/TMax))/2
// (torch.optim.lr_scheduler.CosineAnnealingLR). Past TMax the cosine
// continues, rising again, as PyTorch's does.
type CosineAnnealingLR struct {
	TMax   int     // >= 1
	EtaMin float64 // >= 0
}

func (s CosineAnnealingLR) LR(base float64, step int) float64 {
	return s.EtaMin + (base-s.EtaMin)*(1+math.Cos(math.Pi*float64(step)/float64(s.TMax)))/2
}

func (s CosineAnnealingLR) Validate() error {
	if s.TMax < 1 {
		return invalid("CosineAnnealingLR", "TMax = %d, want >= 1", s.TMax)
	}
	return checkHyper("CosineAnnealingLR", "EtaMin", s.EtaMin)
}

// LinearLR moves the factor applied to base linearly from StartFactor to
// EndFactor over TotalIters steps and holds it there: the usual warm-up
// (torch.optim.lr_scheduler.LinearLR; PyTorch's defaults are 1/3, 1, 5).
type LinearLR struct {
	StartFactor float64 // in (0, 1]
	EndFactor   float64 // in [0, 1]
	TotalIters  int     // >= 1
}

func (s LinearLR) LR(base float64, step int) float64 {
	return base * (s.StartFactor + (s.EndFactor-s.StartFactor)*float64(min(step, s.TotalIters))/float64(s.TotalIters))
}

func (s LinearLR) Validate() error {
	const op = "LinearLR"
	switch {
	case !(s.StartFactor > 0 && s.StartFactor <= 1):
		return invalid(op, "StartFactor = %v is outside (0, 1]", s.StartFactor)
	case !(s.EndFactor >= 0 && s.EndFactor <= 1):
		return invalid(op, "EndFactor = %v is outside [0, 1]", s.EndFactor)
	case s.TotalIters < 1:
		return invalid(op, "TotalIters = %d, want >= 1", s.TotalIters)
	}
	return nil
}

// Sequential runs Schedules one after another, switching at Milestones:
// Schedules[i] runs from Milestones[i−1] (or 0) with its own step counted
// from 0 there (torch.optim.lr_scheduler.SequentialLR). Warm-up then
// cosine decay:
//
//	Sequential{
//		Schedules:  []Schedule{LinearLR{StartFactor: 0.01, EndFactor: 1, TotalIters: 100}, CosineAnnealingLR{TMax: 900}},
//		Milestones: []int{100},
//	}
type Sequential struct {
	Schedules  []Schedule
	Milestones []int // len(Schedules)−1 strictly increasing steps >= 1
}

func (s Sequential) LR(base float64, step int) float64 {
	i := 0
	for i < len(s.Milestones) && step >= s.Milestones[i] {
		i++
	}
	if i > 0 {
		step -= s.Milestones[i-1]
	}
	return s.Schedules[i].LR(base, step)
}

func (s Sequential) Validate() error {
	const op = "Sequential"
	if len(s.Schedules) == 0 || len(s.Milestones) != len(s.Schedules)-1 {
		return invalid(op, "%d schedules need %d milestones, got %d", len(s.Schedules), max(len(s.Schedules)-1, 0), len(s.Milestones))
	}
	for i, m := range s.Milestones {
		if m < 1 || (i > 0 && m <= s.Milestones[i-1]) {
			return invalid(op, "Milestones[%d] = %d; milestones must be strictly increasing and >= 1 (got %v)", i, m, s.Milestones)
		}
	}
	for i, sch := range s.Schedules {
		if sch == nil {
			return invalid(op, "Schedules[%d] is nil", i)
		}
		if err := sch.Validate(); err != nil {
			return fmt.Errorf("optim: Sequential: Schedules[%d]: %w", i, err)
		}
	}
	return nil
}

// LRGroups is the part of an optimizer a Scheduler drives; every Optimizer
// in this package implements it.
type LRGroups interface {
	NumGroups() int
	LR(g int) float64
	SetLR(g int, lr float64)
}

// Scheduler applies a Schedule to an optimizer's groups. It records each
// group's learning rate when created as that group's base and sets the
// rate for step 0 at once, as PyTorch's schedulers do; call Step after each
// optimizer step.
type Scheduler struct {
	opt   LRGroups
	sched Schedule
	base  []float64
	step  int
}

// NewScheduler validates s and sets opt's learning rates for step 0.
func NewScheduler(opt LRGroups, s Schedule) (*Scheduler, error) {
	if s == nil {
		return nil, invalid("NewScheduler", "nil schedule")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	sc := &Scheduler{opt: opt, sched: s, base: make([]float64, opt.NumGroups())}
	for g := range sc.base {
		sc.base[g] = opt.LR(g)
	}
	sc.apply()
	return sc, nil
}

// Step advances to the next step and sets the learning rates for it.
func (s *Scheduler) Step() {
	s.step++
	s.apply()
}

// Steps returns how many times Step has been called (PyTorch's last_epoch).
func (s *Scheduler) Steps() int { return s.step }

func (s *Scheduler) apply() {
	for g, b := range s.base {
		s.opt.SetLR(g, s.sched.LR(b, s.step))
	}
}

// StateDict returns kind "scheduler" with scalars "step" and
// "base_lr.<g>" per group.
func (s *Scheduler) StateDict() *StateDict {
	sd := newStateDict("scheduler")
	sd.Scalars["step"] = float64(s.step)
	for g, b := range s.base {
		sd.Scalars["base_lr."+strconv.Itoa(g)] = b
	}
	return sd
}

// LoadStateDict restores the step and base rates and sets the optimizer's
// learning rates for that step. Nothing changes when it returns an error.
func (s *Scheduler) LoadStateDict(sd *StateDict) error {
	const op = "Scheduler.LoadStateDict"
	if sd == nil {
		return invalid(op, "nil state dict")
	}
	if sd.Kind != "scheduler" {
		return invalid(op, "state dict is of kind %q, want \"scheduler\"", sd.Kind)
	}
	if len(sd.Tensors) != 0 {
		return invalid(op, "unknown tensor key %q", slices.Sorted(maps.Keys(sd.Tensors))[0])
	}
	if err := sameKeys(op, "scalar", s.StateDict().Scalars, sd.Scalars); err != nil {
		return err
	}
	step := sd.Scalars["step"]
	if !(step >= 0 && step <= math.MaxInt32 && step == math.Trunc(step)) {
		return invalid(op, "key \"step\" = %v, want a whole number >= 0", step)
	}
	for g := range s.base {
		if err := checkHyper(op, "key \"base_lr."+strconv.Itoa(g)+"\"", sd.Scalars["base_lr."+strconv.Itoa(g)]); err != nil {
			return err
		}
	}
	s.step = int(step)
	for g := range s.base {
		s.base[g] = sd.Scalars["base_lr."+strconv.Itoa(g)]
	}
	s.apply()
	return nil
}
