package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/cohortml/cohort/tensor"
)

// runVersion is `cohort version`: what was built, from what, and the
// dense-math kernels this machine runs.
func runVersion(args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(os.Stderr, "cohort version: unexpected argument %q\n", args[0])
		return 2
	}
	bi, _ := debug.ReadBuildInfo()
	g, err := tensor.GEMM()
	writeVersion(os.Stdout, bi, g, err)
	return 0
}

// writeVersion renders the version: module version, VCS revision, time
// and dirty flag (from the build info the go command embeds), the Go
// version, GOOS/GOARCH, and the GEMM backend and kernel with the kernels
// the CPU offers.
func writeVersion(w io.Writer, bi *debug.BuildInfo, g tensor.GEMMInfo, gemmErr error) {
	mod, ver := "github.com/cohortml/cohort", "(unknown)"
	settings := map[string]string{}
	if bi != nil {
		if bi.Main.Path != "" {
			mod = bi.Main.Path
		}
		if bi.Main.Version != "" {
			ver = bi.Main.Version
		}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	fmt.Fprintf(w, "cohort %s (%s)\n", ver, mod)
	switch rev := settings["vcs.revision"]; {
	case rev == "":
		fmt.Fprintln(w, "revision: unknown (built without VCS information: go build -buildvcs=false, or outside a checkout)")
	default:
		line := "revision: " + rev
		if t := settings["vcs.time"]; t != "" {
			line += " (" + t + ")"
		}
		if settings["vcs.modified"] == "true" {
			line += ", modified (uncommitted changes)"
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	kernels := strings.Join(g.Kernels, ", ")
	switch {
	case gemmErr != nil:
		fmt.Fprintf(w, "gemm: unavailable: %v (this CPU runs kernels %s)\n", gemmErr, kernels)
	case g.Backend == "go":
		fmt.Fprintf(w, "gemm: cohort's %s kernel, %d threads (this CPU runs: %s)\n", g.Kernel, g.Threads, kernels)
	default:
		fmt.Fprintf(w, "gemm: %s, %d threads (cohort's kernels this CPU runs: %s)\n", g.Backend, g.Threads, kernels)
	}
}
