// Command initworker is the dist program the launch tests start: it joins
// the job with distributed.InitFromEnv (so COHORT_TIMEOUT bounds the join), runs
// one all-reduce and exits 0. On an error it prints it and exits through
// rendezvous.Fail (error file, 128+signal).
//
//	initworker [late RANK]   RANK sleeps 10 minutes before joining: a rank
//	                         that never arrives
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the native and MPI backends
	"github.com/cohortml/cohort/distributed/rendezvous"
)

func main() {
	ctx, stop := rendezvous.SignalContext(context.Background())
	defer stop()
	if len(os.Args) == 3 && os.Args[1] == "late" && os.Getenv("RANK") == os.Args[2] {
		fmt.Println("late: not joining")
		select {
		case <-time.After(10 * time.Minute):
		case <-ctx.Done():
		}
		os.Exit(rendezvous.Fail(ctx, context.Cause(ctx)))
	}
	start := time.Now()
	if err := run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "initworker: after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
		os.Exit(rendezvous.Fail(ctx, err))
	}
	fmt.Println("done")
}

func run(ctx context.Context) error {
	pg, err := distributed.InitFromEnv(ctx)
	if err != nil {
		return err
	}
	defer pg.Close()
	buf := []float32{float32(pg.Rank() + 1)}
	if err := pg.AllReduce(ctx, distributed.F32(buf), distributed.Sum).Wait(); err != nil {
		return err
	}
	fmt.Println("sum " + strconv.FormatFloat(float64(buf[0]), 'g', -1, 32))
	return nil
}
