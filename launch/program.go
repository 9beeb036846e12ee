package launch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// programKind says how Run starts the workers' program.
type programKind int

const (
	kindExecutable programKind = iota // run the file as is
	kindPackage                       // go build it once, run the binary
)

// resolved is the outcome of resolveProgram.
type resolved struct {
	kind programKind
	path string // executable: the file; package: the package argument for go build
}

// resolveProgram decides whether prog names an executable or a Go package:
//
//   - a path to a regular file ("./train", "/opt/bin/train"): that file,
//     which must be executable;
//   - a path to a directory with .go files ("./examples/mnist", "."): that
//     package;
//   - a name without a slash ("python3"): the executable found in PATH,
//     else a directory of that name with .go files;
//   - anything else with a slash that is not on disk and does not start
//     with ./ or ../ ("github.com/cohortml/cohort/examples/mnist", "example.com/x/cmd/y"): a
//     package path for go build.
//
// Relative paths are taken from dir ("" = the current directory).
func resolveProgram(prog, dir string, lookPath func(string) (string, error)) (resolved, error) {
	if prog == "" {
		return resolved{}, errors.New("launch: no program given")
	}
	onDisk := prog
	if !filepath.IsAbs(onDisk) && dir != "" {
		onDisk = filepath.Join(dir, onDisk)
	}
	explicitPath := strings.HasPrefix(prog, "./") || strings.HasPrefix(prog, "../") || prog == "." || prog == ".." || filepath.IsAbs(prog)
	if !strings.Contains(prog, "/") && prog != "." && prog != ".." {
		if p, err := lookPath(prog); err == nil {
			return resolved{kind: kindExecutable, path: p}, nil
		}
		if hasGoFiles(onDisk) {
			return resolved{kind: kindPackage, path: "./" + prog}, nil
		}
		return resolved{}, fmt.Errorf("launch: %q is not in PATH and is not a directory with Go files", prog)
	}
	fi, err := os.Stat(onDisk)
	switch {
	case err == nil && fi.Mode().IsRegular():
		if fi.Mode().Perm()&0o111 == 0 {
			return resolved{}, fmt.Errorf("launch: %s is not executable (chmod +x, or give a Go package directory)", prog)
		}
		p := prog
		if !filepath.IsAbs(p) {
			if p, err = filepath.Abs(onDisk); err != nil {
				return resolved{}, fmt.Errorf("launch: %s: %w", prog, err)
			}
		}
		return resolved{kind: kindExecutable, path: p}, nil
	case err == nil && fi.IsDir():
		if !hasGoFiles(onDisk) {
			return resolved{}, fmt.Errorf("launch: %s is a directory without .go files: not a Go package", prog)
		}
		pkg := prog
		if !explicitPath {
			pkg = "./" + filepath.Clean(prog) // go build reads "a/b" as an import path
		}
		return resolved{kind: kindPackage, path: pkg}, nil
	case err == nil:
		return resolved{}, fmt.Errorf("launch: %s is neither a regular file nor a directory", prog)
	case explicitPath || !errors.Is(err, fs.ErrNotExist):
		return resolved{}, fmt.Errorf("launch: %s: %w", prog, err)
	default:
		return resolved{kind: kindPackage, path: prog}, nil
	}
}

func hasGoFiles(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			return true
		}
	}
	return false
}

// buildPackage runs `go build -o` for pkg into a fresh temporary directory
// and returns the binary's path and the directory (which the caller
// removes). The build's output is part of the error when it fails.
func buildPackage(ctx context.Context, goCmd, pkg, dir string, env []string) (bin, tmp string, err error) {
	goPath, err := exec.LookPath(goCmd)
	if err != nil {
		return "", "", fmt.Errorf("launch: %s is a Go package, but the go command (%q) is not available: %w", pkg, goCmd, err)
	}
	tmp, err = makeTempDir("build")
	if err != nil {
		return "", "", fmt.Errorf("launch: temporary directory for the build: %w", err)
	}
	name := filepath.Base(strings.TrimSuffix(pkg, "/"))
	if name == "." || name == ".." || name == "/" || name == "" {
		name = "worker"
	}
	bin = filepath.Join(tmp, name)
	cmd := exec.CommandContext(ctx, goPath, "build", "-o", bin, pkg)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return "", "", fmt.Errorf("launch: go build %s failed:\n%s", pkg, msg)
	}
	// go build -o writes a library package as an archive: refuse it here
	// rather than fail to start it ("permission denied").
	if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm()&0o111 == 0 {
		os.RemoveAll(tmp)
		name := "not main"
		cmd := exec.CommandContext(ctx, goPath, "list", "-f", "{{.Name}}", pkg)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.Output(); err == nil {
			name = "package " + strings.TrimSpace(string(out))
		}
		return "", "", fmt.Errorf("launch: %s is not a main package (%s): cohort run starts programs, built from a package main", pkg, name)
	}
	return bin, tmp, nil
}
