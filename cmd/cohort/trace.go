package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cohortml/cohort/obs/trace"
)

// runTrace is `cohort trace merge DIR [-o FILE]`: all ranks' timelines
// (COHORT_TRACE=DIR) on one, loadable in Perfetto or chrome://tracing.
func runTrace(args []string) int {
	if len(args) == 0 || args[0] != "merge" {
		fmt.Fprintln(os.Stderr, "usage: cohort trace merge DIR [-o FILE]   (default FILE: DIR/merged.json)")
		return 2
	}
	fs := flag.NewFlagSet("cohort trace merge", flag.ContinueOnError)
	outPath := fs.String("o", "", "output file (default DIR/merged.json)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	rest := fs.Args()
	if len(rest) > 1 { // flags after DIR
		if err := fs.Parse(rest[1:]); err != nil {
			return 2
		}
		rest = append(rest[:1], fs.Args()...)
	}
	if len(rest) != 1 {
		fmt.Fprintln(os.Stderr, "cohort trace merge: want one DIR")
		return 2
	}
	dir := rest[0]
	if *outPath == "" {
		*outPath = filepath.Join(dir, "merged.json")
	}
	f, err := os.Create(*outPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cohort trace merge:", err)
		return 1
	}
	n, err := trace.Merge(dir, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cohort trace merge:", err)
		os.Remove(*outPath)
		return 1
	}
	fmt.Printf("merged %d ranks into %s (open it in https://ui.perfetto.dev or chrome://tracing)\n", n, *outPath)
	return 0
}
