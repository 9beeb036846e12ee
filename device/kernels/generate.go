package kernels

import (
	"embed"
	"fmt"
	"regexp"
	"strings"
)

//go:embed cuda/*.cu cuda/prelude.cuh
var sources embed.FS

// Families lists the kernel families, one CUDA C file each (cuda/NAME.cu),
// in the order the table lists their kernels.
var Families = []string{
	"elementwise", "bias", "gelu", "layernorm", "softmax", "attention", "embedding",
	"classifier", "reduce", "optim", "conv", "pool", "cast",
}

// DType is a storage type that templated kernels are instantiated for.
type DType struct {
	Name  string // the kernel-name suffix: "f32", "bf16"
	CType string // the C type: "float", "bf16" (prelude.cuh's, laid out as __nv_bfloat16)
}

// The storage types, in the order each template block is instantiated.
var (
	F32  = DType{Name: "f32", CType: "float"}
	BF16 = DType{Name: "bf16", CType: "bf16"}
)

// DTypes are the storage types every template block is instantiated for.
var DTypes = []DType{F32, BF16}

const (
	blockStart = "// cohort:dtypes"
	blockEnd   = "// cohort:end"
)

var (
	typeWord   = regexp.MustCompile(`\bfloatX\b`)
	suffixWord = regexp.MustCompile(`\b(\w+)_X\b`)
)

// Instantiate expands the template blocks of a family's source text: the
// lines between "// cohort:dtypes" and "// cohort:end" are repeated once
// per DTypes entry, with the identifier floatX replaced by the C type and
// every identifier ending in "_X" given the type's suffix instead
// (gelu_fwd_X → gelu_fwd_f32, gelu_fwd_bf16; round_X → round_f32,
// round_bf16). Text outside the blocks is copied once. The marker lines
// themselves are dropped; blocks do not nest.
func Instantiate(src string) (string, error) {
	var out strings.Builder
	lines := strings.SplitAfter(src, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == blockEnd {
			return "", fmt.Errorf("kernels: line %d: %q without %q", i+1, blockEnd, blockStart)
		}
		if strings.TrimSpace(lines[i]) != blockStart {
			if strings.Contains(lines[i], "floatX") || suffixWord.MatchString(lines[i]) {
				return "", fmt.Errorf("kernels: line %d: floatX or a name ending in _X outside a template block: %q", i+1, strings.TrimSpace(lines[i]))
			}
			out.WriteString(lines[i])
			continue
		}
		start := i + 1
		end := -1
		for j := start; j < len(lines); j++ {
			switch strings.TrimSpace(lines[j]) {
			case blockEnd:
				end = j
			case blockStart:
				return "", fmt.Errorf("kernels: line %d: nested %q (block opened on line %d)", j+1, blockStart, i+1)
			}
			if end >= 0 {
				break
			}
		}
		if end < 0 {
			return "", fmt.Errorf("kernels: line %d: %q without %q", i+1, blockStart, blockEnd)
		}
		body := strings.Join(lines[start:end], "")
		for k, dt := range DTypes {
			if k > 0 {
				out.WriteString("\n")
			}
			t := typeWord.ReplaceAllLiteralString(body, dt.CType)
			out.WriteString(suffixWord.ReplaceAllString(t, "${1}_"+dt.Name))
		}
		i = end
	}
	return out.String(), nil
}

// Source returns the CUDA C source of a family as NVRTC compiles it: a
// generated-file header, prelude.cuh, and the family's file with its
// template blocks instantiated. The result depends only on the embedded
// files (its golden copies are testdata/generated/FAMILY.cu.golden).
func Source(family string) (string, error) {
	raw, err := sources.ReadFile("cuda/" + family + ".cu")
	if err != nil {
		return "", fmt.Errorf("kernels: no family %q: %w", family, err)
	}
	prelude, err := sources.ReadFile("cuda/prelude.cuh")
	if err != nil {
		return "", fmt.Errorf("kernels: %w", err)
	}
	body, err := Instantiate(string(raw))
	if err != nil {
		return "", fmt.Errorf("kernels: cuda/%s.cu: %s", family, strings.TrimPrefix(err.Error(), "kernels: "))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// Code generated from device/kernels/cuda/%s.cu and prelude.cuh; DO NOT EDIT.\n\n", family)
	b.Write(prelude)
	b.WriteString("\n// ---- ")
	b.WriteString(family)
	b.WriteString(".cu ----\n\n")
	b.WriteString(body)
	return b.String(), nil
}
