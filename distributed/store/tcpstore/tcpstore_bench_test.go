package tcpstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/cohortml/cohort/distributed/store/tcpstore"
)

// benchClient starts a server on loopback and returns a client of it;
// both close when b ends.
func benchClient(b *testing.B) *tcpstore.Client {
	srv, err := tcpstore.Listen("127.0.0.1:0", tcpstore.Options{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	c, err := tcpstore.Dial(context.Background(), srv.Addr().String(), tcpstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkSetGet measures one Set and one Get round trip on loopback.
func BenchmarkSetGet(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	v := []byte("10.0.0.1:45678")
	for b.Loop() {
		if err := c.Set(ctx, "addr", v); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Get(ctx, "addr"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddShared measures Add from many goroutines sharing one client
// (request ids multiplex the connection).
func BenchmarkAddShared(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Add(ctx, "n", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDialAuth measures connecting and authenticating.
func BenchmarkDialAuth(b *testing.B) {
	srv, err := tcpstore.Listen("127.0.0.1:0", tcpstore.Options{Token: strconv.Itoa(42), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	for b.Loop() {
		c, err := tcpstore.Dial(context.Background(), srv.Addr().String(), tcpstore.Options{Token: "42"})
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
