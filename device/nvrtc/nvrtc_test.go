package nvrtc_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/cohortml/cohort/device/internal/libfind"
	"github.com/cohortml/cohort/device/nvrtc"
)

const saxpy = `
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}
`

// load opens the real NVRTC or skips, naming what is missing.
func load(t *testing.T) *nvrtc.Lib {
	t.Helper()
	env := libfind.FromEnv(os.Getenv)
	env.CacheDir = t.TempDir()
	l, err := nvrtc.LoadEnv(env)
	if errors.Is(err, nvrtc.ErrNotFound) {
		t.Skipf("skipped: NVRTC is not installed here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %s from %s", l.VersionString(), l.Path)
	return l
}

func TestCompileTargets(t *testing.T) {
	l := load(t)
	for _, arch := range []string{"compute_80", "compute_90"} {
		t.Run(arch, func(t *testing.T) {
			p, err := l.Compile(saxpy, "saxpy.cu", nvrtc.Options{Arch: arch, NoCache: true})
			if err != nil {
				t.Fatal(err)
			}
			want := ".target sm_" + strings.TrimPrefix(arch, "compute_")
			if !regexp.MustCompile(`(?m)^\.target sm_[0-9]+$`).MatchString(p.PTX) || !strings.Contains(p.PTX, want+"\n") {
				t.Errorf("PTX lacks %q:\n%.400s", want, p.PTX)
			}
			if !strings.Contains(p.PTX, ".entry saxpy(") {
				t.Errorf("PTX lacks the extern \"C\" entry saxpy:\n%.400s", p.PTX)
			}
			if !regexp.MustCompile(`(?m)^\.version [0-9]+\.[0-9]+$`).MatchString(p.PTX) {
				t.Errorf("PTX lacks a .version line")
			}
		})
	}
}

func TestCompileCUBIN(t *testing.T) {
	l := load(t)
	dir := t.TempDir()
	for _, arch := range []string{"sm_80", "sm_90"} {
		t.Run(arch, func(t *testing.T) {
			p, err := l.Compile(saxpy, "saxpy.cu", nvrtc.Options{Arch: arch, CacheDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if p.PTX != "" || len(p.CUBIN) < 64 || string(p.CUBIN[:4]) != "\x7fELF" {
				t.Fatalf("want a CUBIN (ELF) and no PTX: PTX %d bytes, CUBIN %q…", len(p.PTX), p.CUBIN[:min(len(p.CUBIN), 8)])
			}
			again, err := l.Compile(saxpy, "saxpy.cu", nvrtc.Options{Arch: arch, CacheDir: dir})
			if err != nil || !again.Cached || string(again.CUBIN) != string(p.CUBIN) {
				t.Errorf("second compile: cached %v, same CUBIN %v, err %v", again != nil && again.Cached, again != nil && string(again.CUBIN) == string(p.CUBIN), err)
			}
		})
	}
}

func TestCompileWithHeader(t *testing.T) {
	l := load(t)
	src := "#include \"scale.h\"\nextern \"C\" __global__ void k(float *x) { x[threadIdx.x] *= SCALE; }\n"
	p, err := l.Compile(src, "k.cu", nvrtc.Options{Headers: map[string]string{"scale.h": "#define SCALE 3.0f\n"}, NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.PTX, "0f40400000") { // 3.0f
		t.Errorf("PTX does not multiply by the header's 3.0f:\n%s", p.PTX)
	}
	if _, err := l.Compile(src, "k.cu", nvrtc.Options{NoCache: true}); err == nil || !strings.Contains(err.Error(), "scale.h") {
		t.Errorf("without the header: %v, want an error naming scale.h", err)
	}
}

func TestCompileErrorHasLog(t *testing.T) {
	l := load(t)
	_, err := l.Compile("extern \"C\" __global__ void bad(float *x) { x[0] = undefined_name; }\n", "bad.cu", nvrtc.Options{NoCache: true})
	var ce *nvrtc.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *CompileError", err)
	}
	if !strings.Contains(ce.Log, "bad.cu(1)") || !strings.Contains(ce.Log, "undefined_name") {
		t.Errorf("log does not name the file, line and identifier:\n%s", ce.Log)
	}
	if !strings.Contains(err.Error(), "nvrtc: compile bad.cu for compute_80") {
		t.Errorf("error text %q", err)
	}
}

func TestBadOptions(t *testing.T) {
	l := load(t)
	for name, o := range map[string]nvrtc.Options{
		"arch=80":        {Arch: "80"},
		"flag=-arch":     {Flags: []string{"-arch=compute_90"}},
		"flag=undefined": {Flags: []string{"--no-such-flag"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := l.Compile(saxpy, "saxpy.cu", o); err == nil {
				t.Errorf("Compile with %+v: no error", o)
			}
		})
	}
}

func TestCacheHitAndCorruption(t *testing.T) {
	l := load(t)
	dir := t.TempDir()
	o := nvrtc.Options{Arch: "compute_80", CacheDir: dir, Flags: []string{"-DSCALE=2"}}
	first, err := l.Compile(saxpy, "saxpy.cu", o)
	if err != nil {
		t.Fatal(err)
	}
	if first.Cached || first.CacheErr != nil {
		t.Fatalf("first compile: Cached=%v CacheErr=%v", first.Cached, first.CacheErr)
	}
	second, err := l.Compile(saxpy, "saxpy.cu", o)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Cached || second.PTX != first.PTX {
		t.Fatalf("second compile: Cached=%v, same PTX=%v", second.Cached, second.PTX == first.PTX)
	}
	// Other options, arch or source miss.
	for name, o2 := range map[string]nvrtc.Options{
		"arch":  {Arch: "compute_90", CacheDir: dir, Flags: o.Flags},
		"flags": {Arch: "compute_80", CacheDir: dir},
	} {
		p, err := l.Compile(saxpy, "saxpy.cu", o2)
		if err != nil || p.Cached {
			t.Errorf("%s changed: Cached=%v err=%v", name, p != nil && p.Cached, err)
		}
	}
	// Corrupt every entry: the next compile recompiles and repairs.
	files, _ := filepath.Glob(filepath.Join(dir, "*.ptx"))
	if len(files) != 3 {
		t.Fatalf("%d cache files, want 3: %v", len(files), files)
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		os.WriteFile(f, b[:len(b)/2], 0o644)
	}
	third, err := l.Compile(saxpy, "saxpy.cu", o)
	if err != nil {
		t.Fatal(err)
	}
	if third.Cached || third.CacheErr == nil || !strings.Contains(third.CacheErr.Error(), "corrupt") || third.PTX != first.PTX {
		t.Fatalf("after corruption: Cached=%v CacheErr=%v same PTX=%v", third.Cached, third.CacheErr, third.PTX == first.PTX)
	}
	fourth, err := l.Compile(saxpy, "saxpy.cu", o)
	if err != nil || !fourth.Cached {
		t.Fatalf("after repair: Cached=%v err=%v", fourth != nil && fourth.Cached, err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp*")); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}

func TestMissingLibraryOneLine(t *testing.T) {
	empty := t.TempDir()
	_, err := nvrtc.LoadEnv(libfind.Env{LibDir: empty})
	if !errors.Is(err, nvrtc.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines:\n%s", msg)
	}
	if !strings.HasPrefix(msg, "nvrtc: libnvrtc not found (looked in "+empty) || strings.Contains(msg, "system loader") {
		t.Errorf("error %q should name libnvrtc and only the override directory", msg)
	}
}

// Goroutines compiling the same source into one cache all get the same
// PTX, and the cache holds one complete entry.
func TestConcurrentCompiles(t *testing.T) {
	l := load(t)
	dir := t.TempDir()
	const n = 4
	ptx := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, err := l.Compile(saxpy, "saxpy.cu", nvrtc.Options{CacheDir: dir})
			if err == nil {
				ptx[i] = p.PTX
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || ptx[i] != ptx[0] {
			t.Fatalf("goroutine %d: err %v, same PTX %v", i, errs[i], ptx[i] == ptx[0])
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 {
		t.Errorf("cache holds %v, want one entry", files)
	}
}
