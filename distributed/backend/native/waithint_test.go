package native_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/inproc"
)

// hintProbe reports, on its first receive of an op (not of the group's
// standing receives for abort notices, Seq ^0), whether the receive's
// context said someone waits, then whether it came to say so within 5 s.
type hintProbe struct {
	transport.Transport
	once         sync.Once
	first, later chan bool
}

func (p *hintProbe) Recv(ctx context.Context, from int, tag transport.Tag, buf []byte) error {
	if tag.Seq != ^uint64(0) {
		p.once.Do(func() {
			p.first <- transport.Awaited(ctx)
			deadline := time.Now().Add(5 * time.Second)
			for !transport.Awaited(ctx) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			p.later <- transport.Awaited(ctx)
		})
	}
	return p.Transport.Recv(ctx, from, tag, buf)
}

// TestWaitHint: an op posted ahead runs under a context whose wait hint
// says nobody waits, until its caller reaches Wait; a transport asking
// (shm, before it polls) sees the change while the op runs.
func TestWaitHint(t *testing.T) {
	ts := inproc.NewMesh(2)
	probe := &hintProbe{Transport: ts[0], first: make(chan bool, 1), later: make(chan bool, 1)}
	pg0, err := native.New(probe, distributed.GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg0.Close()
	pg1, err := native.New(ts[1], distributed.GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	buf := make([]float32, 3)
	w := pg0.Recv(ctx, distributed.F32(buf), 1, 7)
	select {
	case waited := <-probe.first:
		if waited {
			t.Error("a receive nobody waits for yet runs under a hint saying it is waited for")
		}
	case <-ctx.Done():
		t.Fatal("the posted receive never reached the transport")
	}
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	if !<-probe.later {
		t.Error("the hint did not turn once the caller reached Wait")
	}
	if err := pg1.Send(ctx, distributed.F32([]float32{1, 2, 3}), 0, 7).Wait(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if buf[2] != 3 {
		t.Errorf("received %v", buf)
	}
	if !transport.Awaited(context.Background()) {
		t.Error("a context without a hint is taken as waited for")
	}
}
