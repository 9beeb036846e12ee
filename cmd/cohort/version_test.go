package main

import (
	"bytes"
	"errors"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/cohortml/cohort/tensor"
)

func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/cohortml/cohort", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-07T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	var out bytes.Buffer
	writeVersion(&out, bi, tensor.GEMMInfo{Backend: "go", Kernel: "avx2", Kernels: []string{"go", "avx2"}, Threads: 2}, nil)
	for _, want := range []string{"cohort v0.3.0 (github.com/cohortml/cohort)\n", "revision: 0123abcd (2026-12-07T12:00:00Z), modified (uncommitted changes)\n",
		"go: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n", "gemm: cohort's avx2 kernel, 2 threads (this CPU runs: go, avx2)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	writeVersion(&out, nil, tensor.GEMMInfo{Kernels: []string{"go"}}, errors.New("gemm: libopenblas.so.0 not found"))
	if !strings.Contains(out.String(), "revision: unknown") || !strings.Contains(out.String(), "gemm: unavailable: gemm: libopenblas.so.0 not found") {
		t.Errorf("without build info or BLAS:\n%s", out.String())
	}
	// This binary's own: the real build info and backend.
	out.Reset()
	bi, _ = debug.ReadBuildInfo()
	g, err := tensor.GEMM()
	writeVersion(&out, bi, g, err)
	if !strings.Contains(out.String(), "gemm: ") || !strings.Contains(out.String(), runtime.Version()) {
		t.Errorf("this build's version:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
}
