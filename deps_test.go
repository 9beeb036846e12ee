package cohort_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The layering of docs/ARCHITECTURE.md, checked against `go list`. Each rule
// names a package (or a tree, with "/...") and the cohort packages it may
// import directly; anything not listed is forbidden. The standard library
// and module dependencies are not restricted here except where noted.
var importRules = []struct {
	pkg   string
	allow []string
}{
	// The device conformance suite also checks the optimizer kernels a
	// backend provides (optim.DeviceKernels) and shares tensortest's
	// checks; it is imported by tests only.
	{"github.com/cohortml/cohort/tensor/devicetest", []string{"github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/tensor/tensortest", "github.com/cohortml/cohort/optim"}},
	{"github.com/cohortml/cohort/tensor/...", []string{"github.com/cohortml/cohort/tensor/..."}},
	{"github.com/cohortml/cohort/autograd", []string{"github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/nn", []string{"github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/autograd"}},
	{"github.com/cohortml/cohort/optim", []string{"github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/nn"}},
	// GPT-mini's training recipe and one-process reference, for the
	// parallel layouts' equality tests (imported by tests only).
	{"github.com/cohortml/cohort/models/gpttest", []string{"github.com/cohortml/cohort/models", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/optim", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/models", []string{"github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/nn"}},
	{"github.com/cohortml/cohort/data", []string{"github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/recipe", []string{"github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/optim", "github.com/cohortml/cohort/models", "github.com/cohortml/cohort/data", "github.com/cohortml/cohort/datasets", "github.com/cohortml/cohort/obs/trace"}},
	{"github.com/cohortml/cohort/datasets", []string{"github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/data"}},
	{"github.com/cohortml/cohort/distributed/wire", nil},
	{"github.com/cohortml/cohort/distributed/internal/admit", nil},
	{"github.com/cohortml/cohort/distributed/internal/mpi", nil},
	{"github.com/cohortml/cohort/distributed/grouptest", []string{"github.com/cohortml/cohort/distributed"}},
	{"github.com/cohortml/cohort/distributed/backend/all", []string{"github.com/cohortml/cohort/distributed/backend/..."}},
	{"github.com/cohortml/cohort/distributed/backend/native", []string{"github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/distributed/collective", "github.com/cohortml/cohort/distributed/flight", "github.com/cohortml/cohort/distributed/store", "github.com/cohortml/cohort/distributed/transport/...", "github.com/cohortml/cohort/internal/affinity"}},
	{"github.com/cohortml/cohort/distributed/backend/nccl", []string{"github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/distributed/collective", "github.com/cohortml/cohort/distributed/flight", "github.com/cohortml/cohort/distributed/store", "github.com/cohortml/cohort/device/nccl", "github.com/cohortml/cohort/device/cuda", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/distributed/backend/mpi", []string{"github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/distributed/collective", "github.com/cohortml/cohort/distributed/internal/mpi"}},
	{"github.com/cohortml/cohort/distributed/transport/...", []string{"github.com/cohortml/cohort/distributed/transport/...", "github.com/cohortml/cohort/distributed/wire", "github.com/cohortml/cohort/distributed/internal/admit"}},
	{"github.com/cohortml/cohort/distributed/store/...", []string{"github.com/cohortml/cohort/distributed/store/...", "github.com/cohortml/cohort/distributed/wire", "github.com/cohortml/cohort/distributed/internal/admit"}},
	{"github.com/cohortml/cohort/distributed/rendezvous", []string{"github.com/cohortml/cohort/distributed/store/..."}},
	{"github.com/cohortml/cohort/distributed/collective/...", []string{"github.com/cohortml/cohort/distributed/collective/...", "github.com/cohortml/cohort/distributed/transport"}},
	{"github.com/cohortml/cohort/distributed/distributedtest", []string{"github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/distributed/...", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/distributed/...", []string{"github.com/cohortml/cohort/distributed/...", "github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/internal/affinity"}},
	// The API: no backend, no transport (backends bring their own).
	{"github.com/cohortml/cohort/distributed", []string{"github.com/cohortml/cohort/distributed/collective", "github.com/cohortml/cohort/distributed/flight", "github.com/cohortml/cohort/distributed/rendezvous", "github.com/cohortml/cohort/distributed/store", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/internal/proctest", []string{"github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/distributed/backend/all", "github.com/cohortml/cohort/distributed/rendezvous", "github.com/cohortml/cohort/launch"}},
	// The data-parallel wing: ddp, zero and fsdp are siblings on a shared
	// floor (internal/dp: the bucket reducer and plan, the wrapper core with
	// the same-model check and the Join codec, the shard plan and sharded
	// state); none imports another (TestDataParallelSiblings).
	{"github.com/cohortml/cohort/internal/dp/reducer", nil},
	{"github.com/cohortml/cohort/internal/dp/wrapcore", []string{"github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/internal/dp/reducer", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/autograd"}},
	{"github.com/cohortml/cohort/internal/dp/shard", []string{"github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/optim", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/internal/dp/dptest", []string{"github.com/cohortml/cohort/internal/dp/...", "github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/distributed/...", "github.com/cohortml/cohort/models", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/optim", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/ddp", []string{"github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/internal/dp/reducer", "github.com/cohortml/cohort/internal/dp/wrapcore"}},
	{"github.com/cohortml/cohort/zero", []string{"github.com/cohortml/cohort/internal/dp/...", "github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/optim", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/fsdp", []string{"github.com/cohortml/cohort/internal/dp/...", "github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/optim", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/tp", []string{"github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/models", "github.com/cohortml/cohort/optim"}},
	{"github.com/cohortml/cohort/pipeline", []string{"github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/checkpoint", []string{"github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/optim"}},
	// The GPT recipe on a layout chosen at run time: ddp or layout, above both.
	{"github.com/cohortml/cohort/recipe/parallel", []string{"github.com/cohortml/cohort/recipe", "github.com/cohortml/cohort/ddp", "github.com/cohortml/cohort/layout", "github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/datasets", "github.com/cohortml/cohort/models", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/optim", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/layout", []string{"github.com/cohortml/cohort/internal/dp/...", "github.com/cohortml/cohort/distributed", "github.com/cohortml/cohort/pipeline", "github.com/cohortml/cohort/tp", "github.com/cohortml/cohort/models", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/optim", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/tensor"}},
	{"github.com/cohortml/cohort/obs/...", []string{"github.com/cohortml/cohort/obs/..."}},
	{"github.com/cohortml/cohort/launch/...", []string{"github.com/cohortml/cohort/launch/...", "github.com/cohortml/cohort/distributed/rendezvous", "github.com/cohortml/cohort/distributed/store/...", "github.com/cohortml/cohort/internal/affinity"}},
	{"github.com/cohortml/cohort/internal/affinity", nil},
	{"github.com/cohortml/cohort/internal/warmheap", nil},
	{"github.com/cohortml/cohort/internal/cli", nil},
	{"github.com/cohortml/cohort/internal/extras", []string{"github.com/cohortml/cohort/device/..."}},
	{"github.com/cohortml/cohort/internal/fakebackend", []string{"github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/optim"}},
	{"github.com/cohortml/cohort/plan", nil},
	{"github.com/cohortml/cohort/device/kernels", nil}, // sources and launch table only; its tests use device/nvrtc
	{"github.com/cohortml/cohort/device/cudatensor", []string{"github.com/cohortml/cohort/device/...", "github.com/cohortml/cohort/tensor", "github.com/cohortml/cohort/optim"}},
	{"github.com/cohortml/cohort/device/...", []string{"github.com/cohortml/cohort/device/..."}},
}

// deviceModules are the only module dependencies the device packages may
// import (besides the standard library): they load NVIDIA's libraries at
// run time and must stay free of cgo and of everything else.
var deviceModules = []string{"github.com/ebitengine/purego", "golang.org/x/sys/..."}

// coreTrees must never reach the distributed layer, even indirectly.
var coreTrees = []string{"github.com/cohortml/cohort/tensor/...", "github.com/cohortml/cohort/autograd", "github.com/cohortml/cohort/nn", "github.com/cohortml/cohort/optim", "github.com/cohortml/cohort/data", "github.com/cohortml/cohort/datasets", "github.com/cohortml/cohort/models", "github.com/cohortml/cohort/recipe"}

type listedPkg struct {
	ImportPath string
	Name       string
	Imports    []string
	Deps       []string
}

func matches(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

func listPackages(t *testing.T) []listedPkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Name,Imports,Deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listedPkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// onTop reports whether path is a program, an end-to-end test or the
// benchmarks' package.
func onTop(path string) bool {
	for _, top := range []string{"cmd/...", "examples/...", "tests/...", "bench"} {
		if matches("github.com/cohortml/cohort/"+top, path) {
			return true
		}
	}
	return false
}

func TestImportRules(t *testing.T) {
	for _, p := range listPackages(t) {
		if !strings.HasPrefix(p.ImportPath, "github.com/cohortml/cohort/") {
			continue
		}
		// Test helper packages (and the fake device) are for _test.go files only.
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "github.com/cohortml/cohort/") && strings.HasSuffix(imp, "test") && !strings.HasSuffix(p.ImportPath, "test") {
				t.Errorf("%s imports test helper %s outside _test.go files", p.ImportPath, imp)
			}
			if imp == "github.com/cohortml/cohort/internal/fakebackend" {
				t.Errorf("%s imports the fake device outside _test.go files", p.ImportPath)
			}
		}
		// Programs, end-to-end tests and the benchmarks sit on top: nothing
		// imports them but cmd/cohort (its own internal packages, and bench).
		for _, imp := range p.Imports {
			if onTop(imp) && !strings.HasPrefix(imp, p.ImportPath+"/") &&
				!(p.ImportPath == "github.com/cohortml/cohort/cmd/cohort" && imp == "github.com/cohortml/cohort/bench") {
				t.Errorf("%s imports %s, which only cmd/cohort may import", p.ImportPath, imp)
			}
		}
		// The first rule that matches decides (most specific rules come first);
		// packages without a rule (cmd, examples, bench tools) may import anything.
		for _, r := range importRules {
			if !matches(r.pkg, p.ImportPath) {
				continue
			}
			for _, imp := range p.Imports {
				if !strings.HasPrefix(imp, "github.com/cohortml/cohort/") {
					continue
				}
				ok := false
				for _, a := range r.allow {
					if matches(a, imp) {
						ok = true
						break
					}
				}
				if !ok {
					t.Errorf("%s must not import %s (rule %q)", p.ImportPath, imp, r.pkg)
				}
			}
			break
		}
		for _, core := range coreTrees {
			if !matches(core, p.ImportPath) {
				continue
			}
			for _, d := range p.Deps {
				if matches("github.com/cohortml/cohort/distributed/...", d) || d == "github.com/cohortml/cohort/distributed" || d == "github.com/cohortml/cohort/ddp" || matches("github.com/cohortml/cohort/launch/...", d) {
					t.Errorf("core package %s depends on distributed package %s", p.ImportPath, d)
				}
			}
		}
	}
}

func TestDeviceImports(t *testing.T) {
	for _, p := range listPackages(t) {
		if !matches("github.com/cohortml/cohort/device/...", p.ImportPath) {
			continue
		}
		for _, imp := range p.Imports {
			if !strings.Contains(strings.Split(imp, "/")[0], ".") || strings.HasPrefix(imp, "github.com/cohortml/cohort/") {
				continue // the standard library, or checked by TestImportRules
			}
			ok := false
			for _, m := range deviceModules {
				ok = ok || matches(m, imp) || strings.HasPrefix(imp, strings.TrimSuffix(m, "/...")+"/")
			}
			if !ok {
				t.Errorf("%s must not import %s (device packages import only the standard library, purego and x/sys)", p.ImportPath, imp)
			}
		}
	}
}

// TestDataParallelSiblings: no data-parallel wrapper (ddp, zero, fsdp, and
// layout, whose data-parallel dimension is one more) depends on another,
// even indirectly, and the shared floor under them (internal/dp) on none
// of them.
func TestDataParallelSiblings(t *testing.T) {
	wrappers := []string{"github.com/cohortml/cohort/ddp", "github.com/cohortml/cohort/zero", "github.com/cohortml/cohort/fsdp", "github.com/cohortml/cohort/layout"}
	for _, p := range listPackages(t) {
		mine := slices.Contains(wrappers, p.ImportPath)
		if !mine && !matches("github.com/cohortml/cohort/internal/dp/...", p.ImportPath) {
			continue
		}
		for _, d := range p.Deps {
			if slices.Contains(wrappers, d) && d != p.ImportPath {
				t.Errorf("%s depends on data-parallel wrapper %s: wrappers share internal/dp instead", p.ImportPath, d)
			}
		}
	}
}

// TestNoBackendBelowPrograms: the distributed API, and every library built
// on it (ddp, zero, fsdp, pipeline, tp, layout, …), depends on no backend,
// even indirectly; backends register themselves (distributed.Register) and
// only programs (package main, cmd/cohort's internals, the benchmarks in
// bench/... that cmd/cohort runs) and the test helpers link them in. A backend depends on no other backend.
func TestNoBackendBelowPrograms(t *testing.T) {
	const backends = "github.com/cohortml/cohort/distributed/backend/..."
	for _, p := range listPackages(t) {
		switch {
		case !strings.HasPrefix(p.ImportPath, "github.com/cohortml/cohort/"),
			p.Name == "main",
			matches("github.com/cohortml/cohort/cmd/...", p.ImportPath),
			matches("github.com/cohortml/cohort/bench/...", p.ImportPath),
			strings.HasSuffix(p.ImportPath, "test"),
			p.ImportPath == "github.com/cohortml/cohort/distributed/backend/all":
			continue
		}
		for _, d := range p.Deps {
			if matches(backends, d) && !matches(backends, p.ImportPath) {
				t.Errorf("%s depends on backend %s: only programs link backends in", p.ImportPath, d)
			}
			if matches(backends, d) && matches(backends, p.ImportPath) {
				t.Errorf("backend %s depends on backend %s", p.ImportPath, d)
			}
		}
	}
}
