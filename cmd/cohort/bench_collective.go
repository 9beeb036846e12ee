package main

import (
	"fmt"
	"os"
)

func notBuilt(name string) int {
	fmt.Fprintf(os.Stderr, "cohort: bench %s: not built yet\n", name)
	return 1
}

func benchAllReduce(args []string) int     { return notBuilt("allreduce") }
func benchBroadcast(args []string) int     { return notBuilt("broadcast") }
func benchAllGather(args []string) int     { return notBuilt("allgather") }
func benchReduceScatter(args []string) int { return notBuilt("reducescatter") }
