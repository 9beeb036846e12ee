package datasets

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// This file is the only place the package consults the environment:
//
//	COHORT_MNIST_DIR   directory of the MNIST files (LoadMNIST with dir "")
//	OPTICKS            the Opticks text (OpticksPath), as for the PyTorch anchor
//	GOMODCACHE, GOPATH where the Go module cache is, when `go` cannot say
//	`go env GOROOT`    the Go installation, for GoRootFile
//	`go list -m`       the directory of the module shipping MNIST

// goCommandTimeout bounds each run of the go command.
const goCommandTimeout = 10 * time.Second

// goOutput runs the go command and returns its trimmed output, or "" when
// it fails.
func goOutput(ctx context.Context, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, goCommandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// GoRootFile returns the path of rel (slash-separated) inside the Go
// installation reported by `go env GOROOT`, e.g.
// "src/testdata/Isaac.Newton-Opticks.txt" — a public-domain text that
// ships with every Go toolchain. It fails when the go command is not
// available or the file does not exist.
func GoRootFile(ctx context.Context, rel string) (string, error) {
	root := goOutput(ctx, "env", "GOROOT")
	if root == "" {
		return "", fmt.Errorf("datasets: cannot locate GOROOT (is the go command on PATH?)")
	}
	p := filepath.Join(root, filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("datasets: %w", err)
	}
	return p, nil
}

// OpticksPath returns the path of Isaac Newton's Opticks: the file named
// by $OPTICKS when it is set (the variable the PyTorch anchor reads), so
// that a prebuilt binary runs on a machine without Go, else the copy in the
// Go installation (see GoRootFile).
func OpticksPath(ctx context.Context) (string, error) {
	if p := os.Getenv("OPTICKS"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("datasets: $OPTICKS: %w", err)
		}
		return p, nil
	}
	return GoRootFile(ctx, "src/testdata/Isaac.Newton-Opticks.txt")
}

// defaultMNISTDir resolves the directory used when LoadMNIST gets "".
func defaultMNISTDir(ctx context.Context) (string, error) {
	if d := os.Getenv("COHORT_MNIST_DIR"); d != "" {
		return d, nil
	}
	var tried []string
	for _, c := range mnistModuleDirs(ctx) {
		d := filepath.Join(c, "data")
		if _, err := os.Stat(filepath.Join(d, mnistFiles[0]+".gz")); err == nil {
			return d, nil
		}
		tried = append(tried, d)
	}
	if len(tried) == 0 {
		tried = append(tried, "no Go module cache found")
	}
	return "", fmt.Errorf("datasets: mnist: no data found (looked in %s); set COHORT_MNIST_DIR or pass a directory holding %s.gz and the other MNIST files",
		strings.Join(tried, ", "), mnistFiles[0])
}

// mnistModuleDirs lists candidate directories of the MNIST module, most
// specific first: what the go command reports, then the module cache path
// of the version this binary was built with, then any cached version.
func mnistModuleDirs(ctx context.Context) []string {
	var dirs []string
	if d := goOutput(ctx, "list", "-m", "-f", "{{.Dir}}", mnistModule); d != "" {
		dirs = append(dirs, d)
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		cache = goOutput(ctx, "env", "GOMODCACHE")
	}
	if cache == "" {
		gopath := os.Getenv("GOPATH")
		if gopath == "" {
			if home, err := os.UserHomeDir(); err == nil {
				gopath = filepath.Join(home, "go")
			}
		}
		if gopath != "" {
			cache = filepath.Join(filepath.SplitList(gopath)[0], "pkg", "mod")
		}
	}
	if cache == "" {
		return dirs
	}
	escaped := filepath.Join(cache, filepath.FromSlash(escapeModulePath(mnistModule)))
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == mnistModule {
				dirs = append(dirs, escaped+"@"+dep.Version)
			}
		}
	}
	if matches, _ := filepath.Glob(escaped + "@*"); len(matches) > 0 {
		sort.Sort(sort.Reverse(sort.StringSlice(matches)))
		dirs = append(dirs, matches...)
	}
	return dirs
}

// escapeModulePath applies the module cache's case encoding: each upper
// case letter becomes '!' followed by its lower case form.
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
