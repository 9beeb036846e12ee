package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestLayerTar checks the layer's archive: parents made, path order,
// owners and modes kept, the same bytes for the same input, and the
// mistakes refused.
func TestLayerTar(t *testing.T) {
	files := []entry{
		{path: "/usr/local/bin/cohort", mode: 0o755, data: []byte("binary")},
		{path: "/tmp", mode: 0o1777, dir: true},
		{path: homeDir, mode: 0o755, dir: true, uid: nonrootUID},
	}
	a, err := layerTar(files)
	if err != nil {
		t.Fatal(err)
	}
	reversed := slices.Clone(files)
	slices.Reverse(reversed)
	b, err := layerTar(reversed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("the same entries in another order gave another archive")
	}
	var got []string
	for h := range tarEntries(t, tar.NewReader(bytes.NewReader(a))) {
		got = append(got, fmt.Sprintf("%s %o %c", h.Name, h.Mode, h.Typeflag))
		switch h.Name {
		case "tmp/":
			if h.Mode != 0o1777 {
				t.Errorf("tmp/ mode %o, want 1777", h.Mode)
			}
		case "home/nonroot/":
			if h.Uid != nonrootUID || h.Gid != nonrootUID {
				t.Errorf("home/nonroot/ owned by %d:%d, want %d", h.Uid, h.Gid, nonrootUID)
			}
		}
		if !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: time %v, want the epoch", h.Name, h.ModTime)
		}
	}
	want := []string{"home/ 755 5", "home/nonroot/ 755 5", "tmp/ 1777 5", "usr/ 755 5",
		"usr/local/ 755 5", "usr/local/bin/ 755 5", "usr/local/bin/cohort 755 0"}
	if !slices.Equal(got, want) {
		t.Errorf("archive:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for _, bad := range [][]entry{
		{{path: "relative", data: nil}},
		{{path: "/a", data: nil}, {path: "/a/../a", data: nil}},
		{{path: "/a", data: []byte("file")}, {path: "/a/b", data: nil}},
	} {
		if _, err := layerTar(bad); err == nil || !strings.HasPrefix(err.Error(), "cohort-image: ") {
			t.Errorf("layerTar(%v): %v, want an error", bad, err)
		}
	}
}

// TestSharedObjectsOfThisProgram runs sharedObjects on the test binary:
// a program linked against glibc gets its loader and libraries, each a
// file of this machine, the loader at the path the program names.
func TestSharedObjectsOfThisProgram(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	interp, libs, err := elfDeps(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	got, err := sharedObjects([]string{exe}, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	if interp == "" {
		if len(got) != 0 {
			t.Errorf("a static program needs %v", got)
		}
		return
	}
	if len(got) == 0 || got[0].path != interp {
		t.Fatalf("sharedObjects: %v, want the loader %s first", got, interp)
	}
	names := map[string]bool{}
	for _, e := range got {
		if !fileExists(e.src) {
			t.Errorf("%s: source %s is not a file", e.path, e.src)
		}
		names[path.Base(e.path)] = true
	}
	for _, l := range libs {
		if !names[l] {
			t.Errorf("%s needs %s, not in %v", exe, l, got)
		}
	}
}

// TestImage checks an image built by cohort-image (COHORT_IMAGE names
// its tarball; CI builds one): its configuration, that cohort, mnist and
// gpt are there and need nothing beyond the glibc the image holds, and
// that they run from the unpacked image (--help, cohort version). As root the programs run in a
// chroot of it as its nonroot user with its environment only, so without
// Go, a module cache or this machine's libraries: cohort run trains MNIST
// on 2 ranks and gpt takes 2 steps. Otherwise each prints its help through
// the image's own dynamic loader and libraries.
func TestImage(t *testing.T) {
	file := os.Getenv("COHORT_IMAGE")
	if file == "" {
		t.Skip("set COHORT_IMAGE to a tarball of go run ./cmd/cohort-image to check it (.ci/run does)")
	}
	img, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || !slices.Equal(c.Entrypoint, []string{binDir + "/cohort"}) || c.User != "65532:65532" || !slices.Equal(c.Env, imageEnv) {
		t.Errorf("config: os %s, entrypoint %v, user %q, env %v; want linux, %s/cohort, 65532:65532, %v", cf.OS, c.Entrypoint, c.User, c.Env, binDir, imageEnv)
	}

	root := filepath.Join(t.TempDir(), "rootfs")
	unpack(t, img, root)
	var interp string
	for _, name := range []string{"cohort", "mnist", "gpt"} {
		p := filepath.Join(root, binDir, name)
		f, err := elf.Open(p)
		if err != nil {
			t.Fatalf("%s in the image: %v", name, err)
		}
		in, libs, err := elfDeps(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range libs {
			if !slices.Contains(glibc, l) {
				t.Errorf("%s needs %s: built with cgo", name, l)
			}
		}
		if in != "" && !fileExists(filepath.Join(root, in)) {
			t.Errorf("%s's loader %s is not in the image", name, in)
		}
		interp = in
		t.Logf("%s: loader %q, libraries %v", name, in, libs)
	}

	run := func(timeout time.Duration, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		var cmd *exec.Cmd
		if os.Geteuid() == 0 {
			cmd = exec.CommandContext(ctx, args[0], args[1:]...)
			cmd.Path = args[0] // resolved in the chroot
			cmd.Env = c.Env
			cmd.Dir = c.WorkingDir
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: nonrootUID, Gid: nonrootUID}}
		} else {
			var lib []string
			for _, d := range []string{"lib", "usr/lib", "lib64"} {
				if m := multiarch[runtime.GOARCH]; m != "" {
					lib = append(lib, filepath.Join(root, d, m))
				}
				lib = append(lib, filepath.Join(root, d))
			}
			cmd = exec.CommandContext(ctx, filepath.Join(root, interp), append([]string{"--library-path", strings.Join(lib, ":"), filepath.Join(root, args[0])}, args[1:]...)...)
		}
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s from the image: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, name := range []string{"cohort", "mnist", "gpt"} {
		if out := run(time.Minute, binDir+"/"+name, "--help"); !strings.Contains(out, "sage") {
			t.Errorf("%s --help: no usage in\n%s", name, out)
		}
	}
	if out := run(time.Minute, binDir+"/cohort", "version"); !strings.Contains(out, "go: go1.") {
		t.Errorf("cohort version from the image: no Go version in\n%s", out)
	}
	if os.Geteuid() != 0 {
		t.Logf("not root: the programs ran through the image's loader, not in a chroot; no training run")
		return
	}
	// A container runtime mounts /dev; the chroot gets what the programs
	// use of it: /dev/null (os/exec) and /dev/shm (the shm transport).
	if err := os.MkdirAll(filepath.Join(root, "dev", "shm"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "dev", "shm"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(root, "dev", "null"), syscall.S_IFCHR|0o666, int(1<<8|3)); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "dev", "null"), 0o666); err != nil {
		t.Fatal(err)
	}
	out := run(3*time.Minute, binDir+"/cohort", "run", "--nproc-per-node", "2", binDir+"/mnist", "-limit", "1280", "-epochs", "1")
	if !strings.Contains(out, "[rank 0] test accuracy") {
		t.Errorf("MNIST on 2 ranks in the image: no accuracy in\n%s", out)
	}
	out = run(3*time.Minute, binDir+"/gpt", "-steps", "2")
	if !strings.Contains(out, "loss") {
		t.Errorf("gpt -steps 2 in the image: no loss in\n%s", out)
	}
}

// unpack writes img's file system into dir.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for h := range tarEntries(t, tr) {
		var err error
		name := path.Clean("/" + h.Name)
		if name == "/" {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err == nil {
				_, err = io.Copy(f, tr)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		default:
			t.Fatalf("%s: type %c in the image, which cohort-image does not write", h.Name, h.Typeflag)
		}
		if err == nil {
			err = os.Chmod(p, os.FileMode(h.Mode).Perm()|modeBits(h.Mode))
		}
		if err == nil {
			err = os.Lchown(p, h.Uid, h.Gid)
			if errors.Is(err, os.ErrPermission) {
				err = nil // not root: the owners do not matter then
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// tarEntries ranges over tr's headers (tr reads each one's contents),
// failing t on a broken archive.
func tarEntries(t *testing.T, tr *tar.Reader) iter.Seq[*tar.Header] {
	return func(yield func(*tar.Header) bool) {
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !yield(h) {
				return
			}
		}
	}
}

// modeBits returns the sticky, setuid and setgid bits of a tar mode.
func modeBits(m int64) os.FileMode {
	var fm os.FileMode
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	return fm
}
