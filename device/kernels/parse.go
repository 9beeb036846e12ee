package kernels

import (
	"fmt"
	"regexp"
	"strings"
)

// signature is one extern "C" __global__ function of a source.
type signature struct {
	Name   string
	Params []Param
}

var (
	globalRE = regexp.MustCompile(`extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)`)
	spaceRE  = regexp.MustCompile(`\s+`)
	paramRE  = regexp.MustCompile(`^(.*?[\w*])\s*\b(\w+)$`)
)

// signatures returns the extern "C" __global__ functions of src in order,
// with their parameters.
func signatures(src string) ([]signature, error) {
	var out []signature
	for _, m := range globalRE.FindAllStringSubmatch(src, -1) {
		s := signature{Name: m[1]}
		if list := strings.TrimSpace(m[2]); list != "" && list != "void" {
			for _, d := range strings.Split(list, ",") {
				p, err := parseParam(d)
				if err != nil {
					return nil, fmt.Errorf("kernels: %s: %w", m[1], err)
				}
				s.Params = append(s.Params, p)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// parseParam splits a C parameter declaration into its type and name,
// normalising the type's spacing: "const  float *x" is {"const float*", "x"}.
func parseParam(decl string) (Param, error) {
	d := spaceRE.ReplaceAllString(strings.TrimSpace(decl), " ")
	m := paramRE.FindStringSubmatch(d)
	if m == nil || strings.TrimSpace(m[1]) == "" {
		return Param{}, fmt.Errorf("kernels: parameter %q is not \"type name\"", decl)
	}
	t := strings.ReplaceAll(strings.TrimSpace(m[1]), " *", "*")
	return Param{Type: t, Name: m[2]}, nil
}
