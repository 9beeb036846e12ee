package main

import (
	"fmt"
	"os"
)

func benchTrain(args []string) int {
	fmt.Fprintln(os.Stderr, "cohort: benchTrain: not built yet")
	return 1
}
