package recipe

import (
	"fmt"
	"io"
	"strings"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// ParseDType reads a -dtype flag: "fp32" (or "float32", the default when
// empty) or "bf16" (or "bfloat16"), bfloat16 autocast training.
func ParseDType(s string) (tensor.DType, error) {
	switch strings.ToLower(s) {
	case "", "fp32", "float32":
		return tensor.Float32, nil
	case "bf16", "bfloat16":
		return tensor.BFloat16, nil
	}
	return 0, fmt.Errorf("recipe: dtype %q: want fp32 or bf16", s)
}

// DTypeName is the flag's spelling of dt: "fp32" or "bf16".
func DTypeName(dt tensor.DType) string {
	if dt == tensor.BFloat16 {
		return "bf16"
	}
	return "fp32"
}

// Autocast trains m's matrix products in dt (nn.Autocast) and returns the
// function that undoes it, with a note for the program to print once
// (stderr) when dt's products have no native kernel on this CPU: the
// widening path, named, which computes the same values (float32 products
// of the rounded operands) more slowly than float32 itself. The note is
// empty otherwise.
func Autocast(m nn.Module, dt tensor.DType) (restore func(), note string, err error) {
	if dt != tensor.Float32 && dt != tensor.BFloat16 {
		return nil, "", fmt.Errorf("recipe: dtype %v: want float32 or bfloat16", dt)
	}
	if dt == tensor.BFloat16 {
		info, err := tensor.GEMM()
		if err != nil {
			return nil, "", fmt.Errorf("recipe: bf16 autocast: %w", err)
		}
		note = fallbackNote(info.BF16Kernel)
	}
	return nn.Autocast(m, dt), note, nil
}

// fallbackNote is Autocast's note for bfloat16 products on kernel (as
// tensor.GEMMInfo.BF16Kernel names it): "" for a native one.
func fallbackNote(kernel string) string {
	if !strings.HasPrefix(kernel, "widen/") {
		return ""
	}
	return fmt.Sprintf("recipe: bf16 autocast: no native bfloat16 kernel (AVX512-BF16) in use; products run on the widening fallback %s, slower than fp32", kernel)
}

// UseDType is Autocast for a program's -dtype flag value: it parses s
// (ParseDType), trains m's products in that dtype and, on rank 0, writes
// the fallback note (if any) to notes once.
func UseDType(m nn.Module, s string, rank int, notes io.Writer) error {
	dt, err := ParseDType(s)
	if err != nil {
		return fmt.Errorf("-dtype: %w", err)
	}
	_, note, err := Autocast(m, dt)
	if err == nil && note != "" && rank == 0 {
		fmt.Fprintln(notes, note)
	}
	return err
}
