package main

import (
	"fmt"
	"os"

	"github.com/cohortml/cohort/bench/collbench"
)

// benchCollective runs `cohort bench <op>` through package collbench; the
// workers it spawns are this executable re-run with the same subcommand.
func benchCollective(op string, args []string) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench %s: %v\n", op, err)
		return 1
	}
	return collbench.Main(op, []string{exe, "bench", op}, args, os.Stdout, os.Stderr)
}

func benchAllReduce(args []string) int     { return benchCollective("allreduce", args) }
func benchBroadcast(args []string) int     { return benchCollective("broadcast", args) }
func benchAllGather(args []string) int     { return benchCollective("allgather", args) }
func benchReduceScatter(args []string) int { return benchCollective("reducescatter", args) }
