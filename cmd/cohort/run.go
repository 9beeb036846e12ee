package main

import (
	"fmt"
	"os"
)

func runRun(args []string) int {
	fmt.Fprintln(os.Stderr, "cohort: runRun: not built yet")
	return 1
}
