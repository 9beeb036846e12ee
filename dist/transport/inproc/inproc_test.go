package inproc_test

import (
	"testing"

	"cohort/dist/transport"
	"cohort/dist/transport/inproc"
	"cohort/dist/transport/transporttest"
)

func newWorld(tb testing.TB, n int) transporttest.World {
	ts := inproc.NewMesh(n)
	w := transporttest.World{Kill: func(r int) { ts[r].Kill() }}
	for _, t := range ts {
		w.Transports = append(w.Transports, t)
	}
	return w
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

func BenchmarkPingPong4KiB(b *testing.B) {
	transporttest.PingPong(b, newWorld(b, 2), 4<<10)
}

func BenchmarkThroughput16MiB(b *testing.B) {
	transporttest.Throughput(b, newWorld(b, 2), 16<<20)
}

func BenchmarkExchange4KiB(b *testing.B) {
	transporttest.Exchange(b, newWorld(b, 2), 4<<10)
}
