package mpi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/mpi"
	libmpi "github.com/cohortml/cohort/distributed/internal/mpi"
)

// worldOfTwo, outside mpirun, runs t's test on two ranks under mpirun
// and returns nil; under mpirun it returns the world's group, closed when
// t ends.
func worldOfTwo(t *testing.T) distributed.ProcessGroup {
	t.Helper()
	if !underMPI() {
		runUnderMPI(t, 2, t.Name(), 2*time.Minute)
		return nil
	}
	pg, err := distributed.Init(context.Background(), distributed.Options{Backend: "mpi"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	return pg
}

// TestMPIErrorReturned checks that an error MPI itself detects (a message
// longer than the receive buffer: MPI_ERR_TRUNCATE) comes back, through
// MPI_ERRORS_RETURN, as an *OpError naming the op and wrapping MPI's own
// *libmpi.Error, and breaks that group on that rank only.
func TestMPIErrorReturned(t *testing.T) {
	pg := worldOfTwo(t)
	if pg == nil {
		return
	}
	ctx := context.Background()
	g, err := distributed.NewGroup(ctx, pg, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if pg.Rank() == 0 {
		if err := g.Send(ctx, distributed.F32(make([]float32, 8)), 1, 3).Wait(); err != nil {
			t.Errorf("send: %v", err)
		}
	} else {
		err := g.Recv(ctx, distributed.F32(make([]float32, 4)), 0, 3).Wait()
		var oe *distributed.OpError
		var me *libmpi.Error
		switch {
		case err == nil:
			t.Errorf("recv of 8 elements into 4: no error")
		case !errors.As(err, &oe) || !strings.Contains(err.Error(), "recv"):
			t.Errorf("recv: %v (%T), want an *OpError naming recv", err, err)
		case !errors.As(err, &me) || !strings.Contains(me.Func, "MPI_"):
			t.Errorf("recv: %v, want MPI's own error inside", err)
		default:
			t.Logf("recv: %v", err)
			if err := g.Barrier(ctx).Wait(); !errors.Is(err, distributed.ErrAborted) {
				t.Errorf("barrier after the failed recv: %v, want ErrAborted", err)
			}
		}
	}
	if err := pg.Barrier(ctx).Wait(); err != nil {
		t.Errorf("world barrier after the pair's failure: %v", err)
	}
}

// TestMPIPollAllocs checks that waiting for an op MPI has not completed
// polls MPI_Test without allocating: rank 1 polls a receive that rank 0
// sends only when told to.
func TestMPIPollAllocs(t *testing.T) {
	pg := worldOfTwo(t)
	if pg == nil {
		return
	}
	ctx := context.Background()
	buf := distributed.F32(make([]float32, 4))
	if pg.Rank() == 1 {
		w := pg.Recv(ctx, buf, 0, 5)
		a := mpi.PollAllocs(w, 2000)
		signal := pg.Send(ctx, distributed.F32(make([]float32, 1)), 0, 6)
		if err := errors.Join(w.Wait(), signal.Wait()); err != nil {
			t.Fatal(err)
		}
		switch {
		case a < 0:
			t.Log("funneled: the MPI goroutine polls, not the waiter")
		case a != 0:
			t.Errorf("%v allocations per poll of an op in flight, want 0", a)
		}
	} else if pg.Rank() == 0 {
		if err := pg.Recv(ctx, distributed.F32(make([]float32, 1)), 1, 6).Wait(); err != nil {
			t.Fatal(err)
		}
		if err := pg.Send(ctx, buf, 1, 5).Wait(); err != nil {
			t.Fatal(err)
		}
	}
}
