package libfind

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var nvrtcSpec = Spec{What: "libnvrtc", Sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12"}, Wheel: "nvidia/cuda_nvrtc/lib"}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func names(c []Candidate) []string {
	var out []string
	for _, x := range c {
		out = append(out, x.Name)
	}
	return out
}

func TestCandidatesOverrideIsExclusive(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	touch(t, filepath.Join(b, "libnvrtc.so.12"))
	touch(t, filepath.Join(a, "libnvrtc.so.13"))
	c, looked := Env{LibDir: a + string(os.PathListSeparator) + b, CUDAHome: "/nonexistent"}.Candidates(nvrtcSpec)
	want := []string{filepath.Join(a, "libnvrtc.so.13"), filepath.Join(b, "libnvrtc.so.12")}
	if strings.Join(names(c), " ") != strings.Join(want, " ") {
		t.Errorf("candidates %v, want %v", names(c), want)
	}
	if strings.Join(looked, " ") != a+" "+b {
		t.Errorf("looked %v, want only the override directories", looked)
	}
}

func TestCandidatesWheels(t *testing.T) {
	venv := t.TempDir()
	cu12 := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12")
	cu13 := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cu13", "lib", "libnvrtc.so.13")
	touch(t, cu12)
	touch(t, cu13)
	c, looked := Env{VirtualEnv: venv}.Candidates(nvrtcSpec)
	got := names(c)
	if len(got) < 4 || got[0] != cu13 || got[1] != cu12 || got[len(got)-2] != "libnvrtc.so.13" || got[len(got)-1] != "libnvrtc.so.12" {
		t.Errorf("candidates %v: want the cu13 wheel, the cu12 wheel, …, then the system loader's sonames", got)
	}
	if !strings.HasPrefix(looked[len(looked)-1], "system loader") {
		t.Errorf("last place looked %q, want the system loader", looked[len(looked)-1])
	}
}

func TestCandidatesDriver(t *testing.T) {
	c, looked := Env{CUDAHome: "/nonexistent", VirtualEnv: "/nonexistent"}.Candidates(Spec{What: "libcuda", Sonames: []string{"libcuda.so.1"}, Driver: true})
	if len(c) != 1 || c[0].Name != "libcuda.so.1" || len(looked) != 1 {
		t.Errorf("driver candidates %v looked %v, want only the system loader", names(c), looked)
	}
}

func TestNotFoundOneLine(t *testing.T) {
	err := NotFound("nvrtc", nvrtcSpec, []string{"/a", "/b"}, os.ErrNotExist, os.ErrInvalid)
	if got, want := err.Error(), "nvrtc: libnvrtc not found (looked in /a, /b); last error: file does not exist"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestGoString(t *testing.T) {
	b := []byte("hello\x00world")
	if got := GoString(uintptrOf(&b[0])); got != "hello" {
		t.Errorf("GoString = %q", got)
	}
	if GoString(0) != "" {
		t.Error("GoString(0) != \"\"")
	}
}

func TestTable(t *testing.T) {
	var f struct {
		open  uintptr `sym:"libOpen"`
		close uintptr `sym:"libClose_v2"`
		typed func() int32
	}
	syms := Table(&f)
	if len(syms) != 2 || syms["libOpen"] != &f.open || syms["libClose_v2"] != &f.close {
		t.Errorf("Table = %v, want libOpen and libClose_v2 at the fields' addresses (and the untagged field left out)", syms)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "wrong") {
			t.Errorf("Table of a tagged int32 field: recovered %v, want a panic naming the field", r)
		}
	}()
	var bad struct {
		wrong int32 `sym:"libWrong"`
	}
	Table(&bad)
}
