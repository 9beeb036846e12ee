package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/tensor"
)

var tinyGPT = models.GPTConfig{Vocab: 16, Ctx: 8, NLayer: 8, D: 8, NHead: 2}

// tinyRank builds this rank's stages of a tiny GPT for schedule s (uniform
// split) with batch 8×8, and wraps each in wrap.
func tinyRank(t testing.TB, pg distributed.ProcessGroup, s *Schedule, wrap func(Stage) Stage) ([]Stage, Options) {
	g := newGPT(t, tinyGPT)
	split, err := Uniform(tinyGPT.NLayer, s.NumStages())
	if err != nil {
		t.Fatal(err)
	}
	idx, tgt := batchFor(0, 8*8, tinyGPT.Vocab)
	var stages []Stage
	for c := range s.Virtual {
		st := c*s.Stages + pg.Rank()
		gs, err := g.NewStage(split[st], split[st+1], st == 0, st == s.NumStages()-1)
		if err != nil {
			t.Fatal(err)
		}
		if err := gs.SetBatch(idx, tgt, 8, 8, s.Microbatches); err != nil {
			t.Fatal(err)
		}
		stages = append(stages, wrap(gs))
	}
	return stages, Options{Shape: []int{8 / s.Microbatches, 8, tinyGPT.D}, Split: split}
}

// failing is a Stage that runs fn before microbatch mb's forward pass.
type failing struct {
	Stage
	mb int
	fn func() error
}

func (f failing) Forward(mb int, in *autograd.Var) (*autograd.Var, error) {
	if mb == f.mb {
		if err := f.fn(); err != nil {
			return nil, err
		}
	}
	return f.Stage.Forward(mb, in)
}

// stepErrors runs one Step of the tiny GPT under s on world ranks, each
// rank's stages wrapped by wrap (given the rank's group and the cancel of
// its context), and returns each rank's error.
func stepErrors(t *testing.T, world int, s *Schedule, wrap func(pg distributed.ProcessGroup, cancel context.CancelFunc, st Stage) Stage) []error {
	t.Helper()
	errs := make([]error, world)
	distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx, cancel := context.WithCancel(distributedtest.Context(t, 30*time.Second))
		defer cancel()
		stages, opts := tinyRank(t, pg, s, func(st Stage) Stage { return wrap(pg, cancel, st) })
		pl, err := New(ctx, pg, s, stages, opts)
		if err != nil {
			t.Errorf("rank %d: %v", pg.Rank(), err)
			return
		}
		defer pl.Close()
		_, errs[pg.Rank()] = pl.Step(ctx)
	})
	return errs
}

// A stage that fails (returns an error, panics, or closes its process
// group) stops every rank promptly, and every rank's error names it.
func TestDyingStage(t *testing.T) {
	for _, name := range []string{"gpipe", "1f1b", "zb", "interleaved"} {
		for _, p := range []int{2, 3, 4} {
			for _, how := range []string{"error", "panic", "close"} {
				culprit := p / 2
				t.Run(fmt.Sprintf("%s/p=%d/%s", name, p, how), func(t *testing.T) {
					defer distributedtest.CheckLeaks(t)()
					s, err := NewSchedule(name, p, 0, 4)
					if err != nil {
						t.Skip(err)
					}
					errs := stepErrors(t, p, s, func(pg distributed.ProcessGroup, _ context.CancelFunc, st Stage) Stage {
						if pg.Rank() != culprit {
							return st
						}
						return failing{st, 1, func() error {
							switch how {
							case "panic":
								panic("boom")
							case "close":
								pg.Close()
							}
							return errors.New("boom")
						}}
					})
					for r, err := range errs {
						if err == nil {
							t.Errorf("rank %d: Step succeeded", r)
							continue
						}
						if ctxErr := context.DeadlineExceeded; errors.Is(err, ctxErr) {
							t.Errorf("rank %d hung until its deadline: %v", r, err)
						}
						want := fmt.Sprintf("rank %d", culprit)
						if r == culprit && how != "close" {
							want = "boom"
						}
						t.Logf("rank %d: %v", r, err)
						if !strings.Contains(err.Error(), want) {
							t.Errorf("rank %d: error does not name %q: %v", r, want, err)
						}
					}
				})
			}
		}
	}
}

// Ranks that disagree on the schedule, the microbatches or the split get
// an error on every rank naming the ranks on each side.
func TestRanksDisagree(t *testing.T) {
	cases := []struct {
		name  string
		sched func(r int) (string, int)
		split func(r int) []int
		tied  func(r int) []*autograd.Var
		want  string
	}{
		{"schedule", func(r int) (string, int) {
			if r == 2 {
				return "gpipe", 4
			}
			return "1f1b", 4
		}, nil, nil, "ranks 0, 1 have schedule 1f1b stages 3 virtual 1 microbatches 4"},
		{"microbatches", func(r int) (string, int) { return "1f1b", 4 + 4*(r%2) }, nil, nil, "rank 1 has schedule 1f1b stages 3 virtual 1 microbatches 8"},
		{"split", func(r int) (string, int) { return "1f1b", 4 }, func(r int) []int {
			if r == 0 {
				return []int{0, 1, 2, 8}
			}
			return []int{0, 3, 6, 8}
		}, nil, "rank 0 has schedule 1f1b stages 3 virtual 1 microbatches 4 shape [2 8 8] recompute false split [0 1 2 8]"},
		{"tied", func(r int) (string, int) { return "1f1b", 4 }, nil, func(r int) []*autograd.Var {
			if r == 0 {
				return []*autograd.Var{autograd.NewVar(tensor.New(16, 8), true)}
			}
			return nil
		}, "rank 0 holds 128 tied elements, rank 2 holds 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := make([]error, 3)
			distributedtest.Run(t, 3, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, 30*time.Second)
				name, m := c.sched(pg.Rank())
				s, err := NewSchedule(name, 3, 1, m)
				if err != nil {
					t.Fatal(err)
				}
				stages, opts := tinyRank(t, pg, s, func(st Stage) Stage { return st })
				if c.split != nil {
					opts.Split = c.split(pg.Rank())
				}
				if c.tied != nil {
					opts.Tied = c.tied(pg.Rank())
				}
				pl, err := New(ctx, pg, s, stages, opts)
				if err == nil {
					pl.Close()
				}
				errs[pg.Rank()] = err
			})
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "disagree") {
					t.Errorf("rank %d: got %v, want an error containing %q", r, err, c.want)
				}
			}
		})
	}
}

// Bad sizes are errors before any communication.
func TestBadInput(t *testing.T) {
	if _, err := Uniform(4, 8); err == nil || !strings.Contains(err.Error(), "8 stages for 4 layers") {
		t.Errorf("Uniform(4 layers, 8 stages): %v", err)
	}
	if _, err := Balance([]float64{1, 2}, 3); err == nil || !strings.Contains(err.Error(), "3 stages for 2 layers") {
		t.Errorf("Balance(2 layers, 3 stages): %v", err)
	}
	if _, err := MicrobatchSize(10, 4); err == nil || !strings.Contains(err.Error(), "4 microbatches do not divide a batch of 10") {
		t.Errorf("MicrobatchSize(10, 4): %v", err)
	}
	if _, err := NewSchedule("interleaved", 4, 2, 6); err == nil || !strings.Contains(err.Error(), "not a multiple of 4 stages") {
		t.Errorf("interleaved with 6 microbatches on 4 stages: %v", err)
	}
	if _, err := NewSchedule("zigzag", 2, 1, 2); err == nil || !strings.Contains(err.Error(), `unknown schedule "zigzag"`) {
		t.Errorf("unknown schedule: %v", err)
	}
	var mu sync.Mutex
	var errs []error
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		s, _ := NewSchedule("1f1b", 3, 1, 2)
		_, err := New(context.Background(), pg, s, nil, Options{})
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	for _, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "3 stages but the process group has 2 ranks") {
			t.Errorf("3-stage schedule on 2 ranks: %v", err)
		}
	}
}

// A rank whose own context is cancelled stops every rank, and every rank
// names it, not the neighbour it was waiting for.
func TestCancelledStage(t *testing.T) {
	for _, name := range []string{"gpipe", "1f1b", "zb"} {
		for _, culprit := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/rank%d", name, culprit), func(t *testing.T) {
				defer distributedtest.CheckLeaks(t)()
				s, err := NewSchedule(name, 2, 0, 4)
				if err != nil {
					t.Fatal(err)
				}
				errs := stepErrors(t, 2, s, func(pg distributed.ProcessGroup, cancel context.CancelFunc, st Stage) Stage {
					if pg.Rank() != culprit {
						return st
					}
					// Cancel before the forward pass of microbatch 1:
					// the stage then stops at its next wait for a peer.
					return failing{st, 1, func() error { cancel(); return nil }}
				})
				for r, err := range errs {
					t.Logf("rank %d: %v", r, err)
					switch {
					case err == nil:
						t.Errorf("rank %d: Step succeeded", r)
					case r == culprit && (!errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "failure began")):
						t.Errorf("rank %d (cancelled): want its own cancellation, not blaming another rank: %v", r, err)
					case r != culprit && !strings.Contains(err.Error(), fmt.Sprintf("failure began on pipeline rank %d", culprit)):
						t.Errorf("rank %d: error does not name rank %d: %v", r, culprit, err)
					}
				}
			})
		}
	}
}
