package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cohortml/cohort/internal/extras"
)

// runDoctor is `cohort doctor`: the optional extras found on this machine
// and, for each one absent, what `go test ./...` skipped without it (go
// test says so only with -v).
func runDoctor(args []string) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprintln(os.Stderr, "usage: cohort doctor\n\nLists the optional software cohort uses when present (OpenBLAS, MPI, Slurm,\nChromium, PyTorch, CUDA), found or absent, with the tests that skip without it.")
			return 0
		}
		fmt.Fprintf(os.Stderr, "cohort doctor: takes no arguments, got %q\n", args)
		return 2
	}
	writeDoctor(os.Stdout, extras.Find(context.Background()), extras.Gates())
	return 0
}

// writeDoctor writes the report of found and gates.
func writeDoctor(w io.Writer, found []extras.Status, gates []extras.Gate) {
	fmt.Fprintln(w, "Optional extras (everything else needs only Go):")
	var skipped []string
	for _, s := range found {
		if s.Err == nil {
			fmt.Fprintf(w, "  found   %-19s %s\n          %-19s for %s\n", s.Name, s.Where, "", s.Use)
			continue
		}
		fmt.Fprintf(w, "  absent  %-19s %v\n          %-19s for %s; %s\n", s.Name, s.Err, "", s.Use, s.Install)
		if len(s.Tests) > 0 {
			fmt.Fprintf(w, "          %-19s skipped: %s\n", "", strings.Join(s.Tests, ", "))
			skipped = append(skipped, s.Tests...)
		}
	}
	fmt.Fprintln(w, "Long tests, run only when asked:")
	for _, g := range gates {
		v, _, _ := strings.Cut(g.Var, "=")
		state := "off"
		if os.Getenv(v) != "" {
			state = "on "
		}
		fmt.Fprintf(w, "  %s     %-22s %s: %s\n", state, g.Var, g.What, strings.Join(g.Tests, ", "))
	}
	n := map[string]bool{}
	for _, t := range skipped {
		n[t] = true
	}
	fmt.Fprintf(w, "%d of %d extras found; without the others go test ./... skips the %d tests (or TestX* groups) listed above; go test -v ./... prints each reason.\n",
		len(found)-countAbsent(found), len(found), len(n))
}

func countAbsent(found []extras.Status) int {
	n := 0
	for _, s := range found {
		if s.Err != nil {
			n++
		}
	}
	return n
}
