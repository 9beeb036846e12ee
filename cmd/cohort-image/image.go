package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Where things are in the image.
const (
	binDir     = "/usr/local/bin"
	mnistDir   = "/usr/share/cohort/mnist"
	opticks    = "/usr/share/cohort/opticks.txt"
	homeDir    = "/home/nonroot"
	nonrootUID = 65532 // distroless' nonroot user
)

// imageEnv is the image's environment: the binaries in PATH, and the
// examples' data where datasets looks first (no Go module cache and no Go
// installation in the image).
var imageEnv = []string{
	"PATH=" + binDir + ":/usr/bin:/bin",
	"COHORT_MNIST_DIR=" + mnistDir,
	"OPTICKS=" + opticks,
	"HOME=" + homeDir,
}

// entry is one file or directory of the image's layer.
type entry struct {
	path string // absolute, in the image
	mode int64  // permission bits, with the sticky bit where wanted
	dir  bool
	uid  int
	src  string // the file on this machine to copy, or
	data []byte // the contents
}

// layerTar writes entries as a tar archive in path order, adding each
// missing parent directory (0755, root). Times are the Unix epoch and
// owners numeric, so the same inputs give the same bytes.
func layerTar(entries []entry) ([]byte, error) {
	byPath := map[string]entry{}
	for _, e := range entries {
		p := path.Clean(e.path)
		if !path.IsAbs(p) || p == "/" {
			return nil, fmt.Errorf("cohort-image: %q: want an absolute path below /", e.path)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("cohort-image: %s twice in the image", p)
		}
		e.path = p
		byPath[p] = e
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = entry{path: d, mode: 0o755, dir: true}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := byPath[p]
		if !byPath[path.Dir(p)].dir && path.Dir(p) != "/" {
			return nil, fmt.Errorf("cohort-image: %s is below the file %s", p, path.Dir(p))
		}
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: e.mode, Uid: e.uid, Gid: e.uid,
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		data := e.data
		switch {
		case e.dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case e.src != "":
			var err error
			if data, err = os.ReadFile(e.src); err != nil {
				return nil, fmt.Errorf("cohort-image: %w", err)
			}
			fallthrough
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("cohort-image: %s: %w", p, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("cohort-image: %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// newImage returns a one-layer image of layer (a tar archive) for
// linux/arch, running cohort as the nonroot user.
func newImage(layer []byte, arch string) (v1.Image, error) {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil })
	if err != nil {
		return nil, fmt.Errorf("cohort-image: layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, fmt.Errorf("cohort-image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("cohort-image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: time.Unix(0, 0)} // reproducible: the same inputs, the same digest
	cf.Config = v1.Config{
		Entrypoint: []string{binDir + "/cohort"},
		Cmd:        []string{"help"},
		Env:        imageEnv,
		User:       fmt.Sprintf("%d:%d", nonrootUID, nonrootUID),
		WorkingDir: homeDir,
		StopSignal: "SIGTERM",
	}
	return mutate.ConfigFile(img, cf)
}

// baseFiles are what every image holds besides the binaries: a writable
// /tmp, the nonroot user (distroless' uid 65532) and its home.
func baseFiles() []entry {
	return []entry{
		{path: "/tmp", mode: 0o1777, dir: true},
		{path: homeDir, mode: 0o755, dir: true, uid: nonrootUID},
		{path: "/etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", nonrootUID, nonrootUID, homeDir))},
		{path: "/etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonrootUID))},
	}
}

// glibc lists the shared objects a Go program built without cgo may need:
// purego, which loads OpenBLAS, MPI and CUDA at run time, links the
// program against glibc's dlopen, so it has an interpreter (the dynamic
// loader) and these, and nothing else.
var glibc = []string{"libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6", "librt.so.1"}

// multiarch is Debian's library directory name per GOARCH.
var multiarch = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// sharedObjects returns the files of this machine that the ELF programs
// bins need at run time, each with its path in the image: the dynamic
// loader at the path the programs name, and the glibc libraries (and what
// they need in turn) where the loader looks for them. A statically linked
// program needs none. A program needing a library outside glibc is
// refused: it was built with cgo, and the image holds no other library.
func sharedObjects(bins []string, arch string) ([]entry, error) {
	var interp string
	var needed []string
	for _, b := range bins {
		in, libs, err := fileDeps(b)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			if !slices.Contains(glibc, l) && l != path.Base(in) {
				return nil, fmt.Errorf("cohort-image: %s needs %s: build it without cgo (CGO_ENABLED=0), the image holds only glibc", filepath.Base(b), l)
			}
		}
		switch {
		case in == "":
		case interp == "":
			interp = in
		case in != interp:
			return nil, fmt.Errorf("cohort-image: %s's dynamic loader is %s, another's %s", filepath.Base(b), in, interp)
		}
		needed = append(needed, libs...)
	}
	if interp == "" {
		if len(needed) > 0 {
			return nil, fmt.Errorf("cohort-image: %v needed without a dynamic loader", needed)
		}
		return nil, nil
	}
	loader, err := filepath.EvalSymlinks(interp)
	if err != nil {
		return nil, fmt.Errorf("cohort-image: the programs' dynamic loader: %w", err)
	}
	dirs := []string{filepath.Dir(loader)}
	if m := multiarch[arch]; m != "" {
		dirs = append(dirs, "/lib/"+m, "/usr/lib/"+m)
	}
	dirs = append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	out := []entry{{path: interp, mode: 0o755, src: loader}}
	done := map[string]bool{path.Base(interp): true}
	for len(needed) > 0 {
		name := needed[0]
		needed = needed[1:]
		if done[name] {
			continue
		}
		done[name] = true
		found := ""
		for _, d := range dirs {
			if p := filepath.Join(d, name); fileExists(p) {
				found = p
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("cohort-image: %s not found on this machine (looked in %s)", name, strings.Join(dirs, ", "))
		}
		real, err := filepath.EvalSymlinks(found)
		if err != nil {
			return nil, fmt.Errorf("cohort-image: %w", err)
		}
		_, more, err := fileDeps(real)
		if err != nil {
			return nil, err
		}
		needed = append(needed, more...)
		out = append(out, entry{path: found, mode: 0o755, src: real})
	}
	return out, nil
}

// fileDeps is elfDeps of the ELF file at path.
func fileDeps(path string) (interp string, needed []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", nil, fmt.Errorf("cohort-image: %w", err)
	}
	defer f.Close()
	if interp, needed, err = elfDeps(f); err != nil {
		return "", nil, fmt.Errorf("cohort-image: %s: %w", path, err)
	}
	return interp, needed, nil
}

// elfDeps returns f's interpreter ("" when statically linked) and the
// shared libraries it names (DT_NEEDED).
func elfDeps(f *elf.File) (interp string, libs []string, err error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return "", nil, err
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	libs, err = f.ImportedLibraries()
	if err != nil && f.Section(".dynamic") == nil {
		err = nil // no dynamic section: static
	}
	return interp, libs, err
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
