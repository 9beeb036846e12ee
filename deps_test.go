package cohort_test

import (
	"encoding/json"
	"io"
	"os/exec"
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
	{"cohort/tensor/...", []string{"cohort/tensor/..."}},
	{"cohort/autograd", []string{"cohort/tensor"}},
	{"cohort/nn", []string{"cohort/tensor", "cohort/autograd"}},
	{"cohort/optim", []string{"cohort/tensor", "cohort/autograd", "cohort/nn"}},
	{"cohort/models", []string{"cohort/tensor", "cohort/autograd", "cohort/nn"}},
	{"cohort/data", []string{"cohort/tensor"}},
	{"cohort/datasets", []string{"cohort/tensor", "cohort/data"}},
	{"cohort/dist/wire", nil},
	{"cohort/dist/internal/admit", nil},
	{"cohort/dist/internal/mpi", nil},
	{"cohort/dist/grouptest", []string{"cohort/dist"}},
	{"cohort/dist/transport/...", []string{"cohort/dist/transport/...", "cohort/dist/wire", "cohort/dist/internal/admit"}},
	{"cohort/dist/store/...", []string{"cohort/dist/store/...", "cohort/dist/wire", "cohort/dist/internal/admit"}},
	{"cohort/dist/rendezvous", []string{"cohort/dist/store/..."}},
	{"cohort/dist/collective/...", []string{"cohort/dist/collective/...", "cohort/dist/transport"}},
	{"cohort/dist/disttest", []string{"cohort/dist", "cohort/dist/...", "cohort/tensor"}},
	{"cohort/dist/...", []string{"cohort/dist/...", "cohort/dist", "cohort/tensor", "cohort/internal/affinity"}},
	{"cohort/dist", []string{"cohort/dist/...", "cohort/tensor", "cohort/internal/affinity"}},
	{"cohort/ddp/reducer", nil},
	{"cohort/ddp", []string{"cohort/dist", "cohort/nn", "cohort/autograd", "cohort/tensor", "cohort/ddp/reducer"}},
	{"cohort/zero", []string{"cohort/internal/wrapcore", "cohort/ddp", "cohort/ddp/reducer", "cohort/dist", "cohort/nn", "cohort/optim", "cohort/autograd", "cohort/tensor"}},
	{"cohort/internal/wrapcore", []string{"cohort/dist", "cohort/ddp/reducer", "cohort/nn", "cohort/autograd"}},
	{"cohort/internal/proctest", []string{"cohort/dist", "cohort/dist/rendezvous", "cohort/launch"}},
	{"cohort/fsdp", []string{"cohort/internal/wrapcore", "cohort/zero", "cohort/ddp", "cohort/ddp/reducer", "cohort/dist", "cohort/nn", "cohort/optim", "cohort/autograd", "cohort/tensor"}},
	{"cohort/tp", []string{"cohort/dist", "cohort/nn", "cohort/autograd", "cohort/tensor", "cohort/models", "cohort/optim"}},
	{"cohort/pipeline", []string{"cohort/dist", "cohort/autograd", "cohort/tensor"}},
	{"cohort/checkpoint", []string{"cohort/tensor", "cohort/nn", "cohort/optim"}},
	{"cohort/layout", []string{"cohort/dist", "cohort/pipeline", "cohort/tp", "cohort/models", "cohort/nn", "cohort/optim", "cohort/autograd", "cohort/tensor"}},
	{"cohort/obs/...", []string{"cohort/obs/..."}},
	{"cohort/launch/...", []string{"cohort/launch/...", "cohort/dist/rendezvous", "cohort/dist/store/...", "cohort/internal/affinity"}},
	{"cohort/internal/affinity", nil},
}

// coreTrees must never reach the distributed layer, even indirectly.
var coreTrees = []string{"cohort/tensor/...", "cohort/autograd", "cohort/nn", "cohort/optim", "cohort/data", "cohort/datasets", "cohort/models"}

type listedPkg struct {
	ImportPath string
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
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...").Output()
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

func TestImportRules(t *testing.T) {
	for _, p := range listPackages(t) {
		if !strings.HasPrefix(p.ImportPath, "cohort/") {
			continue
		}
		// Test helper packages are for _test.go files only.
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "cohort/") && strings.HasSuffix(imp, "test") && !strings.HasSuffix(p.ImportPath, "test") {
				t.Errorf("%s imports test helper %s outside _test.go files", p.ImportPath, imp)
			}
		}
		// The first rule that matches decides (most specific rules come first);
		// packages without a rule (cmd, examples, bench tools) may import anything.
		for _, r := range importRules {
			if !matches(r.pkg, p.ImportPath) {
				continue
			}
			for _, imp := range p.Imports {
				if !strings.HasPrefix(imp, "cohort/") {
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
				if matches("cohort/dist/...", d) || d == "cohort/dist" || d == "cohort/ddp" || matches("cohort/launch/...", d) {
					t.Errorf("core package %s depends on distributed package %s", p.ImportPath, d)
				}
			}
		}
	}
}
