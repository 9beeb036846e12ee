package nccl_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cohortml/cohort/device/cuda/cudatest"
	"github.com/cohortml/cohort/device/internal/libfind"
	"github.com/cohortml/cohort/device/nccl"
)

// TestMissingLibraryOneLine: without NCCL where the environment points,
// Load fails with one line naming libnccl and every place looked, wrapping
// ErrNotFound.
func TestMissingLibraryOneLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		env   libfind.Env
		looks []string
	}{
		{"lib dir", libfind.Env{LibDir: dir}, []string{dir}},
		{"override", libfind.Env{NCCLLibrary: filepath.Join(dir, "libnccl.so.2"), LibDir: dir},
			[]string{"COHORT_NCCL_LIBRARY=" + filepath.Join(dir, "libnccl.so.2")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := nccl.LoadEnv(tc.env)
			if err == nil {
				t.Skip("skipped: an NCCL library loaded from " + dir)
			}
			msg := err.Error()
			if !errors.Is(err, nccl.ErrNotFound) || strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "nccl: libnccl not found (looked in ") {
				t.Errorf("error %q: want one line wrapping ErrNotFound, naming libnccl", msg)
			}
			for _, w := range tc.looks {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %s", msg, w)
				}
			}
		})
	}
}

// TestMissingLibraryNamesEveryPlace: the default search names the toolkit,
// the wheels and the system loader.
func TestMissingLibraryNamesEveryPlace(t *testing.T) {
	venv := t.TempDir()
	_, err := nccl.LoadEnv(libfind.Env{VirtualEnv: venv, CUDAHome: filepath.Join(venv, "cuda")})
	if err == nil {
		t.Skip("skipped: this machine has NCCL")
	}
	msg := err.Error()
	for _, w := range []string{filepath.Join(venv, "cuda", "lib64"), "/usr/local/cuda/lib64", "system loader (libnccl.so.2, libnccl.so)"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not name %s", msg, w)
		}
	}
}

func TestSpecWheels(t *testing.T) {
	venv := t.TempDir()
	site := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia")
	if err := os.MkdirAll(site, 0o755); err != nil {
		t.Fatal(err)
	}
	_, looked := libfind.Env{VirtualEnv: venv}.Candidates(nccl.Spec)
	for _, d := range []string{filepath.Join(site, "cu13", "lib"), filepath.Join(site, "nccl", "lib")} {
		found := false
		for _, l := range looked {
			found = found || l == d
		}
		if !found {
			t.Errorf("looked %v: want %s", looked, d)
		}
	}
}

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{22703: "2.27.3", 21805: "2.18.5", 2804: "2.8.4"} {
		if got := nccl.VersionString(v); got != want {
			t.Errorf("VersionString(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestErrorText(t *testing.T) {
	e := &nccl.Error{Call: "ncclAllReduce", Code: nccl.RemoteError, Msg: "remote process exited or there was a network error", Last: "peer 1 closed the connection"}
	want := "nccl: ncclAllReduce: ncclRemoteError (remote process exited or there was a network error): peer 1 closed the connection"
	if e.Error() != want {
		t.Errorf("got %q, want %q", e.Error(), want)
	}
}

// TestGPULoad loads the real NCCL and creates a unique id (GPU machines).
func TestGPULoad(t *testing.T) {
	l := cudatest.Load(t, "NCCL", nccl.Load, nccl.ErrNotFound)
	if l.Version < 21000 {
		t.Errorf("version %d: want NCCL 2.10 or newer (bfloat16, avg)", l.Version)
	}
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	if id == (nccl.UniqueID{}) {
		t.Error("GetUniqueID returned zeros")
	}
	t.Logf("NCCL %s from %s", nccl.VersionString(l.Version), l.Path)
}

func TestDataTypeSize(t *testing.T) {
	for dt, want := range map[nccl.DataType]int{nccl.Int8: 1, nccl.Float16: 2, nccl.BFloat16: 2, nccl.Float32: 4, nccl.Int32: 4, nccl.Float64: 8, nccl.Int64: 8} {
		if dt.Size() != want {
			t.Errorf("DataType(%d).Size() = %d, want %d", dt, dt.Size(), want)
		}
	}
}
