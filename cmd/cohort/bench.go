package main

import (
	"fmt"
	"os"

	"github.com/cohortml/cohort/bench"
)

// benchTrain and benchPipeline run `cohort bench train` and `cohort bench
// pipeline` through package bench; the workers they spawn are this
// executable re-run with the same subcommand.
func benchTrain(args []string) int    { return benchSelf("train", bench.Train, args) }
func benchPipeline(args []string) int { return benchSelf("pipeline", bench.Pipeline, args) }

func benchSelf(name string, run func(self, args []string) int, args []string) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench %s: %v\n", name, err)
		return 1
	}
	return run([]string{exe, "bench", name}, args)
}
