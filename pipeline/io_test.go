package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/tensor"
)

// ioLog is one rank's transcript of the executor's work: stage passes as
// they start and transfers as the transport is asked for them.
type ioLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *ioLog) add(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// loggedTransport records the pipeline's point-to-point messages (dist
// numbers them 1<<63 | tag<<32 | count, and the executor's tag is
// mb·stages + producer, so an activation and a gradient look alike here:
// the order tells them apart); collectives and abort notices pass
// unrecorded.
type loggedTransport struct {
	transport.Transport
	log       *ioLog
	numStages int
}

func (t *loggedTransport) note(verb string, tag transport.Tag) {
	if tag.Seq>>63 != 1 {
		return
	}
	ptag := int(tag.Seq >> 32 & (1<<31 - 1))
	if ptag >= abortTagBase {
		return
	}
	t.log.add("%s%d/s%d", verb, ptag/t.numStages, ptag%t.numStages)
}

func (t *loggedTransport) Send(ctx context.Context, to int, tag transport.Tag, p []byte) error {
	t.note("send", tag)
	return t.Transport.Send(ctx, to, tag, p)
}

func (t *loggedTransport) Recv(ctx context.Context, from int, tag transport.Tag, p []byte) error {
	t.note("recv", tag)
	return t.Transport.Recv(ctx, from, tag, p)
}

// loggedStage records each forward pass, and each backward pass as it
// reaches the stage's output.
type loggedStage struct {
	Stage
	log   *ioLog
	stage int
}

func (s loggedStage) Forward(mb int, in *autograd.Var) (*autograd.Var, error) {
	s.log.add("F%d/s%d", mb, s.stage)
	out, err := s.Stage.Forward(mb, in)
	if err != nil {
		return nil, err
	}
	return autograd.Record("mark", out.Value, []*autograd.Var{out}, func(g *tensor.Tensor) []*tensor.Tensor {
		s.log.add("B%d/s%d", mb, s.stage)
		return []*tensor.Tensor{g}
	}), nil
}

// want is the transcript rank r's schedule implies when every transfer
// happens at its own action: the schedule's actions in order, a split
// backward's input pass as B and its weight pass unseen, and a message
// named by the stage that produced it.
func want(s *Schedule, r int) string {
	var b []string
	for _, a := range s.Ranks[r] {
		switch a.Kind {
		case Forward:
			b = append(b, fmt.Sprintf("F%d/s%d", a.Microbatch, a.Stage))
		case Backward, BackwardInput:
			b = append(b, fmt.Sprintf("B%d/s%d", a.Microbatch, a.Stage))
		case SendAct, SendGrad:
			b = append(b, fmt.Sprintf("send%d/s%d", a.Microbatch, a.Stage))
		case RecvAct:
			b = append(b, fmt.Sprintf("recv%d/s%d", a.Microbatch, a.Stage-1))
		case RecvGrad:
			b = append(b, fmt.Sprintf("recv%d/s%d", a.Microbatch, a.Stage+1))
		}
	}
	return strings.Join(b, " ")
}

// The executor moves each message at its own action: a receive reaches
// the transport only after the compute the schedule puts before it (not
// when the step starts, which would leave an op goroutine waiting in the
// transport while the stages compute), and a send before the action
// after it when the process group buffers sends, so the peer is not kept
// waiting for a hand-off. Each rank's
// transcript over two steps is its schedule's action list, twice. Without
// Options.SendsBuffered, sends are left to dist's op goroutine, and the
// receives keep their places.
func TestTransfersAtTheirActions(t *testing.T) {
	for _, c := range []struct {
		name                    string
		stages, virtual, micros int
		asyncSends              bool
	}{{"gpipe", 2, 1, 4, false}, {"1f1b", 2, 1, 4, false}, {"1f1b", 4, 1, 8, false}, {"zb", 2, 1, 4, false},
		{"interleaved", 2, 2, 4, false}, {"1f1b", 2, 1, 4, true}, {"zb", 4, 1, 8, true}} {
		s, err := NewSchedule(c.name, c.stages, c.virtual, c.micros)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s/p=%d/v=%d/m=%d", c.name, c.stages, s.Virtual, c.micros)
		if c.asyncSends {
			name += "/async-sends"
		}
		t.Run(name, func(t *testing.T) {
			mesh := inproc.NewMesh(c.stages)
			logs := make([]*ioLog, c.stages)
			groups := make([]distributed.ProcessGroup, c.stages)
			for r := range c.stages {
				logs[r] = &ioLog{}
				pg, err := native.New(&loggedTransport{mesh[r], logs[r], s.NumStages()}, distributed.GroupOptions{})
				if err != nil {
					t.Fatal(err)
				}
				groups[r] = pg
			}
			errs := make([]error, c.stages)
			var wg sync.WaitGroup
			for r, pg := range groups {
				wg.Go(func() {
					defer pg.Close()
					stages, opts := tinyRank(t, pg, s, func(st Stage) Stage { return st })
					for i := range stages {
						stages[i] = loggedStage{stages[i], logs[r], i*c.stages + r}
					}
					opts.SendsBuffered = !c.asyncSends // inproc buffers every send
					p, err := New(context.Background(), pg, s, stages, opts)
					if err != nil {
						errs[r] = err
						return
					}
					defer p.Close()
					for range 2 {
						if _, err := p.Step(context.Background()); err != nil {
							errs[r] = err
							return
						}
					}
				})
			}
			wg.Wait()
			for r := range c.stages {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				w, got := want(s, r), strings.Join(logs[r].lines, " ")
				if c.asyncSends {
					// A send now reaches the transport whenever the op
					// goroutine runs it; the rest keeps its order.
					w, got = dropSends(w), dropSends(got)
				}
				if got != w+" "+w {
					t.Errorf("rank %d transcript:\n got %s\nwant %s %s", r, got, w, w)
				}
			}
		})
	}
}

// dropSends removes the sends from a transcript.
func dropSends(s string) string {
	return strings.Join(slices.DeleteFunc(strings.Fields(s), func(f string) bool { return strings.HasPrefix(f, "send") }), " ")
}
