package kernels

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cohortml/cohort/device/cuda/cudatest"
	"github.com/cohortml/cohort/device/nvrtc"
)

// Archs are the virtual architectures every kernel must compile for: the
// A100's and the H100's.
var archs = []string{"compute_80", "compute_90"}

var (
	entryRE = regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)
	regRE   = regexp.MustCompile(`\.reg \.(\w+)\s+%\w+<(\d+)>;`)
)

// ptxEntry is one kernel's part of a PTX module.
type ptxEntry struct {
	name       string
	body       string
	local      bool // declares or touches .local memory: a spill or a stack array
	virtualReg int  // PTX virtual registers declared (an upper bound before allocation)
}

// ptxEntries splits a PTX module at its .entry directives.
func ptxEntries(ptx string) []ptxEntry {
	locs := entryRE.FindAllStringSubmatchIndex(ptx, -1)
	var out []ptxEntry
	for i, l := range locs {
		end := len(ptx)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		e := ptxEntry{name: ptx[l[2]:l[3]], body: ptx[l[0]:end]}
		e.local = strings.Contains(e.body, ".local")
		for _, m := range regRE.FindAllStringSubmatch(e.body, -1) {
			if m[1] == "pred" {
				continue
			}
			n, _ := strconv.Atoi(m[2])
			e.virtualReg += n
		}
		out = append(out, e)
	}
	return out
}

// TestCompile compiles every family with the real NVRTC for compute_80
// and compute_90 (skipped, saying why, where NVRTC is absent), and checks
// that the PTX has an entry for each of the family's table kernels and no
// local memory (.local: spills or stack arrays). It logs the kernels with
// the most PTX virtual registers; those are declarations before register
// allocation, an upper bound of what ptxas will use, the only measure
// available without a GPU's toolchain.
func TestCompile(t *testing.T) {
	lib := cudatest.Load(t, "NVRTC", nvrtc.Load, nvrtc.ErrNotFound)
	t.Logf("NVRTC %s from %s", lib.VersionString(), lib.Path)
	byFamily := map[string][]string{}
	for _, k := range Table() {
		byFamily[k.Family] = append(byFamily[k.Family], k.Name)
	}
	var all []ptxEntry
	for _, f := range Families {
		src, err := Source(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, arch := range archs {
			t.Run(f+"/"+arch, func(t *testing.T) {
				p, err := lib.Compile(src, f+".cu", nvrtc.Options{Arch: arch, NoCache: true})
				if err != nil {
					t.Fatal(err)
				}
				if strings.TrimSpace(p.Log) != "" {
					t.Errorf("NVRTC warnings:\n%s", p.Log)
				}
				entries := ptxEntries(p.PTX)
				var names []string
				for _, e := range entries {
					names = append(names, e.name)
					if e.local {
						t.Errorf("%s uses local memory in its PTX (a spill or a stack array)", e.name)
					}
				}
				for _, k := range byFamily[f] {
					if !slices.Contains(names, k) {
						t.Errorf("PTX has no entry %s (entries %v)", k, names)
					}
				}
				if arch == archs[len(archs)-1] {
					all = append(all, entries...)
				}
			})
		}
	}
	slices.SortFunc(all, func(a, b ptxEntry) int { return b.virtualReg - a.virtualReg })
	var top []string
	for _, e := range all[:min(8, len(all))] {
		top = append(top, fmt.Sprintf("%s %d", e.name, e.virtualReg))
	}
	t.Logf("most PTX virtual registers (%s): %s", archs[len(archs)-1], strings.Join(top, ", "))
}
