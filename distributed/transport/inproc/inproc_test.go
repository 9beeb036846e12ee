package inproc_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

func newWorld(tb testing.TB, n int) transporttest.World {
	ts := inproc.NewMesh(n)
	return transporttest.WorldOf(tb, ts, make([]error, n), (*inproc.Transport).Kill)
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, newWorld, transporttest.Config{})
}

func TestNewMeshPanicsOnEmptyWorld(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewMesh(0) did not panic")
		}
	}()
	inproc.NewMesh(0)
}

var _ transport.Transport = (*inproc.Transport)(nil)

// BenchmarkTransport runs transporttest's benchmarks.
func BenchmarkTransport(b *testing.B) { transporttest.Benchmarks(b, newWorld) }

// TestSynctest: the mesh blocks only on channels, so timeouts can be
// tested with a fake clock: an hour-long deadline passes instantly.
func TestSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := inproc.NewMesh(2)
		defer ts[0].Close()
		defer ts[1].Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		start := time.Now()
		err := ts[0].Recv(ctx, 1, transport.Tag{Seq: 1}, make([]byte, 4))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v", err)
		}
		if d := time.Since(start); d != time.Hour {
			t.Fatalf("fake clock advanced %v, want exactly 1h", d)
		}
		go func() {
			time.Sleep(time.Minute)
			ts[1].Send(context.Background(), 0, transport.Tag{Seq: 2}, []byte("late"))
		}()
		p := make([]byte, 4)
		if err := ts[0].Recv(t.Context(), 1, transport.Tag{Seq: 2}, p); err != nil || string(p) != "late" {
			t.Fatalf("%q %v", p, err)
		}
		if d := time.Since(start); d != time.Hour+time.Minute {
			t.Fatalf("fake clock at %v", d)
		}
	})
}

func TestKillNamesTheDeadRank(t *testing.T) {
	ts := inproc.NewMesh(3)
	defer func() {
		for _, tr := range ts {
			tr.Close()
		}
	}()
	ts[2].Kill()
	err := ts[0].Recv(context.Background(), 2, transport.Tag{}, nil)
	want := "inproc: rank 0: recv from rank 2 (group 0 seq 0 step 0): transport: peer 2: killed"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	err = ts[1].Send(context.Background(), 2, transport.Tag{}, nil)
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 2 {
		t.Fatalf("send to the dead rank: %v", err)
	}
}
