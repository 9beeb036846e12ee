// Command collcheck joins the job its launcher describes (torchrun,
// Slurm, OpenMPI, … through distributed.InitFromEnv), all-reduces a vector whose
// expected sum it knows, checks every element and prints
//
//	OK rank=R world=W source=S
//
// It exits 1 with the first mismatch or error.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the native and MPI backends
	"github.com/cohortml/cohort/distributed/rendezvous"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "collcheck:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	pg, err := distributed.InitFromInfo(ctx, info, distributed.Options{})
	if err != nil {
		return err
	}
	defer pg.Close()
	const n = 1000
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(pg.Rank()*n + i)
	}
	if err := pg.AllReduce(ctx, distributed.F32(v), distributed.Sum).Wait(); err != nil {
		return err
	}
	w := pg.Size()
	got := v
	for i := range n {
		// Σ_r (r·n + i) = n·w(w−1)/2 + w·i
		want := float32(n*w*(w-1)/2 + w*i)
		if got[i] != want {
			return fmt.Errorf("rank %d: element %d = %v, want %v", pg.Rank(), i, got[i], want)
		}
	}
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return err
	}
	fmt.Printf("OK rank=%d world=%d source=%s\n", pg.Rank(), w, info.Source)
	return nil
}
